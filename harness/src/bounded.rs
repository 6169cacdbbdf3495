//! Lists and maps read from a file of another machine's (a partial report, a baseline),
//! refused past a count before more are read: a list of empty strings costs 24 bytes or
//! more a string for three bytes of text (`"",`), so a 240 MB partial of warnings took
//! 7.2 GB to merge before its lists were bounded. Each bound is what a run can write,
//! said where it is used.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

fn too_many<E: de::Error>(max: usize) -> E {
    E::custom(format!(
        "more than {max} entries in a list of at most {max}: not written by a run"
    ))
}

/// A list of at most `N` items.
pub fn vec<'de, D, T, const N: usize>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct AtMost<T, const N: usize>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for AtMost<T, N> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a list of at most {N} items")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element()? {
                if items.len() == N {
                    return Err(too_many(N));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    deserializer.deserialize_seq(AtMost::<T, N>(PhantomData))
}

/// A map of at most `N` entries.
pub fn map<'de, D, K, V, const N: usize>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
{
    struct AtMost<K, V, const N: usize>(PhantomData<(K, V)>);
    impl<'de, K, V, const N: usize> Visitor<'de> for AtMost<K, V, N>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
    {
        type Value = BTreeMap<K, V>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a map of at most {N} entries")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BTreeMap<K, V>, A::Error> {
            let mut entries = BTreeMap::new();
            while let Some((k, v)) = map.next_entry()? {
                if entries.len() == N {
                    return Err(too_many(N));
                }
                entries.insert(k, v);
            }
            Ok(entries)
        }
    }
    deserializer.deserialize_map(AtMost::<K, V, N>(PhantomData))
}

/// [`vec`] for a field that may be absent or `null`.
pub fn option_vec<'de, D, T, const N: usize>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(bound = "T: Deserialize<'de>")]
    struct Inner<T, const N: usize>(#[serde(deserialize_with = "vec::<_, _, N>")] Vec<T>);
    Ok(Option::<Inner<T, N>>::deserialize(deserializer)?.map(|inner| inner.0))
}

/// A text of at most `N` bytes: a warning or an error a run wrote is a sentence, and one
/// of 250 MB, copied into every report the merge writes, took 1.58 GB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<const N: usize>(pub String);

impl<'de, const N: usize> Deserialize<'de> for Text<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text<N>, D::Error> {
        struct AtMost<const N: usize>;
        impl<const N: usize> Visitor<'_> for AtMost<N> {
            type Value = Text<N>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "a text of at most {N} bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<N>, E> {
                if v.len() > N {
                    return Err(E::custom(format!(
                        "a text of {} bytes, in a place of at most {N}: not written by a run",
                        v.len()
                    )));
                }
                Ok(Text(v.to_owned()))
            }
        }
        deserializer.deserialize_str(AtMost::<N>)
    }
}

/// A [`Text`] field.
pub fn text<'de, D: Deserializer<'de>, const N: usize>(
    deserializer: D,
) -> Result<String, D::Error> {
    Ok(Text::<N>::deserialize(deserializer)?.0)
}

/// [`text`] for a field that may be absent or `null`.
pub fn option_text<'de, D, const N: usize>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::<Text<N>>::deserialize(deserializer)?.map(|t| t.0))
}

/// A list of at most `ITEMS` texts of at most `BYTES` bytes each.
pub fn texts<'de, D, const ITEMS: usize, const BYTES: usize>(
    deserializer: D,
) -> Result<Vec<String>, D::Error>
where
    D: Deserializer<'de>,
{
    let items: Vec<Text<BYTES>> = vec::<_, _, ITEMS>(deserializer)?;
    Ok(items.into_iter().map(|t| t.0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Said {
        #[serde(deserialize_with = "texts::<_, 2, 8>")]
        warnings: Vec<String>,
        #[serde(default, deserialize_with = "option_text::<_, 8>")]
        error: Option<String>,
    }

    #[test]
    fn texts_past_their_length_are_refused_and_the_rest_read() {
        let ok: Said = serde_json::from_str(r#"{"warnings":["a","b\n"],"error":"gone"}"#)
            .expect("short texts");
        assert_eq!((ok.warnings.len(), ok.error.as_deref()), (2, Some("gone")));
        let long = serde_json::from_str::<Said>(r#"{"warnings":["123456789"]}"#)
            .err()
            .expect("a warning of 9 bytes");
        assert!(
            long.to_string()
                .contains("9 bytes, in a place of at most 8"),
            "{long}"
        );
        assert!(serde_json::from_str::<Said>(r#"{"warnings":[],"error":"123456789"}"#).is_err());
        assert!(serde_json::from_str::<Said>(r#"{"warnings":["a","b","c"]}"#).is_err());
    }
}
