//! Configuration errors: one per problem, each naming the file, the rule path, the field
//! and (where known) the line.
//!
//! This module owns only the error types and their rendering; it decides nothing about what
//! is valid (that is `compile`) and reads no files (that is `loader`).

use std::fmt;
use std::path::PathBuf;

/// One problem in one configuration file.
///
/// Rendered as `file:line: path: message`, leaving out the line when it is unknown and the
/// path when the problem concerns the whole file, e.g.
/// `config/api.yaml:12: descriptors[2].rate_limit.unit: unknown unit "fortnight" (...)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file the problem is in.
    pub file: PathBuf,
    /// Where in the file: `descriptors[2].descriptors[0].rate_limit.unit`, or `""` for the
    /// file as a whole.
    pub path: String,
    /// 1-based line, when the parser (or the position scan) knows it.
    pub line: Option<usize>,
    /// What is wrong, for a human.
    pub message: String,
}

impl ConfigError {
    /// An error at `path` in `file`, without a line.
    pub fn new(file: impl Into<PathBuf>, path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { file: file.into(), path: path.into(), line: None, message: message.into() }
    }

    /// The same error, at `line` (1-based).
    pub fn at_line(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if self.path.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in one load, in file order. Never empty when returned as an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The individual errors.
    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }

    /// How many problems were found.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there is no error (never the case for a returned `Err`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> Self {
        ConfigErrors(vec![error])
    }
}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// One error per line.
impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}
