//! A resolved policy read from a file (a baseline's, a report's), bounded: input from
//! another machine, read into a tree that costs 40 bytes or more a value for two bytes
//! of text (`0,`), so a 62 MB list took 2.6 GB to read before it was bounded.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::Value;

/// The most values one resolved policy read from a file may hold: a policy resolves to
/// a few dozen (every field, a few lists of statuses).
pub const MAX_VALUES: usize = 4096;

/// The deepest a resolved policy read from a file may nest: a policy's deepest field is
/// three levels down (`backoff.exponential.base`).
pub const MAX_DEPTH: usize = 16;

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let left = std::cell::Cell::new(MAX_VALUES);
        de::DeserializeSeed::deserialize(
            Bounded {
                left: &left,
                depth: 0,
            },
            deserializer,
        )
    }
}

/// A value read within [`MAX_VALUES`] (all its values together, `left` of them still to
/// read) and [`MAX_DEPTH`] (`depth`, its own).
struct Bounded<'a> {
    left: &'a std::cell::Cell<usize>,
    depth: usize,
}

impl Bounded<'_> {
    /// Counts one value read; an error past the bound.
    fn one<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format!(
                "a resolved policy holds more than {MAX_VALUES} values (a policy resolves to a few dozen)"
            ))),
        }
    }

    /// A value nested one level down.
    fn inner<E: de::Error>(&self) -> Result<Bounded<'_>, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format!(
                "a resolved policy nests more than {MAX_DEPTH} levels deep (a policy's deepest field is three)"
            )));
        }
        Ok(Bounded {
            left: self.left,
            depth: self.depth + 1,
        })
    }
}

impl<'de> de::DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a policy's field as a plan writes it")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.one()?;
        Ok(Value::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.one()?;
        Ok(Value::Int(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.one()?;
        Ok(u64::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.one()?;
        Ok(Value::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.one()?;
        Ok(Value::Text(v.to_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.one()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.inner()?)? {
            items.push(item);
        }
        Ok(Value::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.one()?;
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.inner()?)?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}
