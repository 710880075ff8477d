//! Refuses floating-point scalars where the policy expects a string (`value: 1.5`,
//! `key: 1.5`), as envoyproxy/ratelimit does, while integers and booleans keep loading as
//! their text (`value: 123`, `value: true`).
//!
//! The typed parse reads every string field with `deserialize_str`, which yields the text
//! as written but cannot tell a plain `1.5` from a quoted `"1.5"`. This second, untyped
//! walk over the same document sees YAML's own resolution of each plain scalar, so the
//! error carries serde_yaml's line and path (through `<<` and aliases too). It judges
//! nothing else: every other value is accepted here and left to the typed parse.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, EnumAccess, IgnoredAny, MapAccess, SeqAccess, VariantAccess, Visitor,
};
use serde::Deserializer;

/// The fields of the policy schema that hold strings. `metadata` is free-form and not
/// walked; numeric fields (`requests_per_unit`, `burst`) already refuse floats by type.
const STRING_FIELDS: [&str; 7] = ["domain", "failure_mode", "key", "value", "unit", "name", "algorithm"];

/// Walks the first document of `source`; the error names the first float found in a
/// string field. Call only after the typed parse succeeded (it reports syntax errors).
pub(super) fn refuse_floats(source: &str) -> Result<(), serde_yaml::Error> {
    match serde_yaml::Deserializer::from_str(source).next() {
        Some(document) => Probe { string_field: false }.deserialize(document),
        None => Ok(()),
    }
}

/// One node of the walk; `string_field` when it is the value of a string field.
#[derive(Clone, Copy)]
struct Probe {
    string_field: bool,
}

impl<'de> DeserializeSeed<'de> for Probe {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        if self.string_field {
            return Err(E::custom(
                "a floating-point number where a string belongs: quote it (e.g. \"1.5\") to use it as text",
            ));
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        Ok(())
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Probe { string_field: false })?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            match key.as_str() {
                Some("metadata") => {
                    map.next_value::<IgnoredAny>()?;
                }
                name => {
                    let string_field = name.is_some_and(|name| STRING_FIELDS.contains(&name));
                    map.next_value_seed(Probe { string_field })?;
                }
            }
        }
        Ok(())
    }

    /// A tagged node (`!name …`): its content is judged as if untagged.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let (IgnoredAny, variant) = data.variant()?;
        variant.newtype_variant_seed(self)
    }
}
