//! What an `approx.lua` call answers: Redis's clock, then each bucket's window counts.

use redis::Value;

use crate::store::charge::StoreError;

use super::super::window::Counts;

/// `{now, (s, c, p)×n}`.
pub(super) fn parse(value: Value, n: usize) -> Result<(u64, Vec<Counts>), StoreError> {
    let int = |v: &Value| match v {
        Value::Int(i) => Some((*i).max(0) as u64),
        _ => None,
    };
    match value {
        Value::Array(items) if items.len() == 1 + 3 * n => {
            let numbers: Option<Vec<u64>> = items.iter().map(int).collect();
            let numbers = numbers.ok_or_else(|| StoreError::Server("unexpected approx.lua reply".into()))?;
            let counts = numbers[1..]
                .chunks_exact(3)
                .map(|c| Counts { start: c[0], current: c[1], previous: c[2] })
                .collect();
            Ok((numbers[0], counts))
        }
        Value::ServerError(e) => {
            Err(StoreError::Server(format!("{}: {}", e.code(), e.details().unwrap_or(""))))
        }
        other => Err(StoreError::Server(format!("unexpected approx.lua reply {other:?}"))),
    }
}
