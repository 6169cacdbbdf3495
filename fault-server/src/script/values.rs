//! The checked values of a script: probabilities, weights, attempt numbers, statuses,
//! gRPC codes and pushbacks, methods, paths and header names, each refused with its
//! line:column while it is deserialised, and `OneOrMany` (one value or a list). Re-exported
//! by [`super::spec`], whose DTOs hold them.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::duration::DurationSpec;

/// A probability in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(into = "f64")]
pub struct Probability(f64);

impl Probability {
    /// Always.
    pub const ONE: Probability = Probability(1.0);

    /// The value, in `[0, 1]`.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Probability {
    type Error = String;

    fn try_from(value: f64) -> Result<Self, String> {
        if (0.0..=1.0).contains(&value) {
            Ok(Probability(value))
        } else {
            Err(format!("probability must be within [0, 1], got {value}"))
        }
    }
}

impl From<Probability> for f64 {
    fn from(p: Probability) -> f64 {
        p.0
    }
}

/// A relative weight: finite and `>= 0`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(into = "f64")]
pub struct Weight(f64);

impl Weight {
    /// The value, `>= 0`.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Weight {
    type Error = String;

    fn try_from(value: f64) -> Result<Self, String> {
        if value.is_finite() && value >= 0.0 {
            Ok(Weight(value))
        } else {
            Err(format!("weight must be a finite number >= 0, got {value}"))
        }
    }
}

impl From<Weight> for f64 {
    fn from(w: Weight) -> f64 {
        w.0
    }
}

/// An attempt number, 1-based (attempt 1 is the first send).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "u32")]
pub struct AttemptNumber(u32);

impl AttemptNumber {
    /// The number, `>= 1`.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for AttemptNumber {
    type Error = String;

    fn try_from(value: u32) -> Result<Self, String> {
        if value >= 1 {
            Ok(AttemptNumber(value))
        } else {
            Err("attempt numbers start at 1 (the first send)".into())
        }
    }
}

impl From<AttemptNumber> for u32 {
    fn from(a: AttemptNumber) -> u32 {
        a.0
    }
}

/// A peer number: which of the listening sockets of one service (numbered from 1, in the
/// order of a proxy's `server` lines) a request arrived at; at most
/// [`crate::wire::MAX_PEERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "u32")]
pub struct PeerNumber(u32);

impl PeerNumber {
    /// The number, in `1..=MAX_PEERS`.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for PeerNumber {
    type Error = String;

    fn try_from(value: u32) -> Result<Self, String> {
        let max = crate::wire::MAX_PEERS;
        if value >= 1 && usize::try_from(value).is_ok_and(|v| v <= max) {
            Ok(PeerNumber(value))
        } else {
            Err(format!(
                "peers are numbered from 1 (the first `server` line of the proxy in front) to {max}, got {value}"
            ))
        }
    }
}

impl From<PeerNumber> for u32 {
    fn from(p: PeerNumber) -> u32 {
        p.0
    }
}

/// An HTTP status code a fault may answer with: 200 to 599 (a 1xx is not a final
/// response).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "u16")]
pub struct StatusCodeSpec(u16);

impl StatusCodeSpec {
    /// The code, in `200..=599`.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl TryFrom<u16> for StatusCodeSpec {
    type Error = String;

    fn try_from(value: u16) -> Result<Self, String> {
        if (200..=599).contains(&value) {
            Ok(StatusCodeSpec(value))
        } else {
            Err(format!("status must be within 200..=599, got {value}"))
        }
    }
}

impl From<StatusCodeSpec> for u16 {
    fn from(s: StatusCodeSpec) -> u16 {
        s.0
    }
}

/// A gRPC status code other than OK, by name (any case, `_` or `-`) or number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct GrpcCodeSpec(u8);

impl GrpcCodeSpec {
    /// The code, in `1..=16`.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl TryFrom<String> for GrpcCodeSpec {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match crate::wire::grpc::parse_code(&value) {
            Some(0) => Err(
                "grpc: OK is no fault (a request the script does not fault is answered OK)".into(),
            ),
            Some(code) => Ok(GrpcCodeSpec(code)),
            None => Err(format!(
                "unknown gRPC status `{value}`: one of {}",
                crate::wire::grpc::NAMES[1..]
                    .iter()
                    .map(|n| n.to_ascii_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}

impl From<GrpcCodeSpec> for String {
    fn from(c: GrpcCodeSpec) -> String {
        crate::wire::grpc::label(c.0)
    }
}

/// `pushback:` a duration (`200ms`), or `stop` for a negative pushback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub enum PushbackSpec {
    After(DurationSpec),
    Stop,
}

impl TryFrom<String> for PushbackSpec {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        if value.trim().eq_ignore_ascii_case("stop") {
            return Ok(PushbackSpec::Stop);
        }
        crate::duration::parse_duration(&value)
            .map(|d| PushbackSpec::After(DurationSpec::from(d)))
            .map_err(|e| format!("pushback: {e}, or `stop` (a negative pushback: do not retry)"))
    }
}

impl From<PushbackSpec> for String {
    fn from(p: PushbackSpec) -> String {
        match p {
            PushbackSpec::Stop => "stop".into(),
            PushbackSpec::After(d) => crate::duration::format_duration(d.get()),
        }
    }
}

/// An HTTP method name (a token such as `POST`), stored upper-case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct MethodSpec(String);

impl MethodSpec {
    /// The method, upper-case.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for MethodSpec {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        if !value.is_empty() && value.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
            Ok(MethodSpec(value.to_ascii_uppercase()))
        } else {
            Err(format!("{value:?} is not an HTTP method (e.g. GET, POST)"))
        }
    }
}

impl From<MethodSpec> for String {
    fn from(m: MethodSpec) -> String {
        m.0
    }
}

/// A path prefix or glob; must start with `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct PathSpec(String);

impl PathSpec {
    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PathSpec {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        if value.starts_with('/') || value.starts_with('*') {
            Ok(PathSpec(value))
        } else {
            Err(format!(
                "path {value:?} must start with / (a prefix such as /payments, or a glob such as /items/*)"
            ))
        }
    }
}

impl From<PathSpec> for String {
    fn from(p: PathSpec) -> String {
        p.0
    }
}

/// An HTTP header name (a token), stored lower-case.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub struct HeaderNameSpec(String);

impl HeaderNameSpec {
    /// The name, lower-case.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `tchar` of RFC 9110.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl TryFrom<String> for HeaderNameSpec {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        if is_token(&value) {
            Ok(HeaderNameSpec(value.to_ascii_lowercase()))
        } else {
            Err(format!("{value:?} is not a valid HTTP header name"))
        }
    }
}

impl From<HeaderNameSpec> for String {
    fn from(h: HeaderNameSpec) -> String {
        h.0
    }
}

/// The name of a header a fault adds to its response (`respond.headers`): a header name
/// ([`HeaderNameSpec`]) that is not one of [`FRAMING_HEADERS`], stored lower-case.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub struct ResponseHeaderName(String);

/// The headers that frame a message or manage its connection (RFC 9112 §6, RFC 9110
/// §7.6.1): the server writes them from the body and the connection it keeps. One
/// scripted beside its own (`content-length: "0"` before a body, a `transfer-encoding`
/// the body does not follow) makes the client read the response wrong and, on a
/// kept-alive connection, the next response too: a script may not set them.
pub const FRAMING_HEADERS: [&str; 8] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

impl ResponseHeaderName {
    /// The name, lower-case.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ResponseHeaderName {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        let name = HeaderNameSpec::try_from(value)?.0;
        if FRAMING_HEADERS.contains(&name.as_str()) {
            return Err(format!(
                "`{name}` frames the response or manages its connection, which the server does itself: a scripted one would desynchronise a kept-alive connection (a fault may not set {})",
                FRAMING_HEADERS.join(", ")
            ));
        }
        Ok(ResponseHeaderName(name))
    }
}

impl From<ResponseHeaderName> for String {
    fn from(h: ResponseHeaderName) -> String {
        h.0
    }
}

/// One value or a list of values: `respond: { status: 503 }` or `respond: [ … ]`,
/// `method: POST` or `method: [POST, PATCH]`. Serialises as a list.
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        OneOrMany(Vec::new())
    }
}

impl<T> From<Vec<T>> for OneOrMany<T> {
    fn from(items: Vec<T>) -> Self {
        OneOrMany(items)
    }
}

struct OneOrManyVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrManyVisitor<T> {
    type Value = OneOrMany<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("one value or a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Vec::<T>::deserialize(SeqAccessDeserializer::new(seq)).map(OneOrMany)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(|one| OneOrMany(vec![one]))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        T::deserialize(value.into_deserializer()).map(|one| OneOrMany(vec![one]))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Self::Value, E> {
        T::deserialize(value.into_deserializer()).map(|one| OneOrMany(vec![one]))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
        T::deserialize(value.into_deserializer()).map(|one| OneOrMany(vec![one]))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
        T::deserialize(value.into_deserializer()).map(|one| OneOrMany(vec![one]))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
        T::deserialize(value.into_deserializer()).map(|one| OneOrMany(vec![one]))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Self::Value, E> {
        T::deserialize(value.into_deserializer()).map(|one| OneOrMany(vec![one]))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(OneOrManyVisitor(PhantomData))
    }
}

impl<T: Serialize> Serialize for OneOrMany<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

// Deserialisation of the ranged newtypes runs the range check inside the visitor, so
// serde_yaml attaches the value's own line and column to the error (with
// `#[serde(try_from)]` the check would run after the value was consumed, and the error
// would point at the enclosing mapping instead).

struct FloatVisitor<T>(&'static str, PhantomData<T>);

impl<T: TryFrom<f64, Error = String>> Visitor<'_> for FloatVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<T, E> {
        T::try_from(value).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        self.visit_f64(value as f64)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        self.visit_f64(value as f64)
    }
}

struct IntVisitor<T, Raw>(&'static str, PhantomData<(T, Raw)>);

impl<Raw, T> Visitor<'_> for IntVisitor<T, Raw>
where
    Raw: TryFrom<u64> + fmt::Display,
    T: TryFrom<Raw, Error = String>,
{
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        let raw = Raw::try_from(value)
            .map_err(|_| E::custom(format!("{value} is out of range: expected {}", self.0)))?;
        T::try_from(raw).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        match u64::try_from(value) {
            Ok(value) => self.visit_u64(value),
            Err(_) => Err(E::custom(format!(
                "{value} is negative: expected {}",
                self.0
            ))),
        }
    }
}

struct StringVisitor<T>(&'static str, PhantomData<T>);

impl<T: TryFrom<String, Error = String>> Visitor<'_> for StringVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<T, E> {
        T::try_from(value.to_string()).map_err(E::custom)
    }
}

/// A gRPC code as a name or a number.
struct GrpcCodeVisitor;

impl Visitor<'_> for GrpcCodeVisitor {
    type Value = GrpcCodeSpec;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a gRPC status code such as `unavailable` or 14")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<GrpcCodeSpec, E> {
        GrpcCodeSpec::try_from(value.to_string()).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<GrpcCodeSpec, E> {
        self.visit_str(&value.to_string())
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<GrpcCodeSpec, E> {
        self.visit_str(&value.to_string())
    }
}

macro_rules! deserialize_with {
    ($ty:ty, $method:ident, $visitor:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.$method($visitor)
            }
        }
    };
}

deserialize_with!(
    Probability,
    deserialize_f64,
    FloatVisitor::<Probability>("a probability in [0, 1]", PhantomData)
);
deserialize_with!(
    Weight,
    deserialize_f64,
    FloatVisitor::<Weight>("a weight >= 0", PhantomData)
);
deserialize_with!(
    AttemptNumber,
    deserialize_u32,
    IntVisitor::<AttemptNumber, u32>("an attempt number (1, 2, …)", PhantomData)
);
deserialize_with!(
    PeerNumber,
    deserialize_u32,
    IntVisitor::<PeerNumber, u32>("a peer number (1, 2, …)", PhantomData)
);
deserialize_with!(
    StatusCodeSpec,
    deserialize_u16,
    IntVisitor::<StatusCodeSpec, u16>("an HTTP status code (200..=599)", PhantomData)
);
deserialize_with!(GrpcCodeSpec, deserialize_any, GrpcCodeVisitor);
deserialize_with!(
    PushbackSpec,
    deserialize_str,
    StringVisitor::<PushbackSpec>("a duration such as `200ms`, or `stop`", PhantomData)
);
deserialize_with!(
    MethodSpec,
    deserialize_str,
    StringVisitor::<MethodSpec>("an HTTP method", PhantomData)
);
deserialize_with!(
    PathSpec,
    deserialize_str,
    StringVisitor::<PathSpec>("a path prefix or glob", PhantomData)
);
deserialize_with!(
    HeaderNameSpec,
    deserialize_str,
    StringVisitor::<HeaderNameSpec>("an HTTP header name", PhantomData)
);
deserialize_with!(
    ResponseHeaderName,
    deserialize_str,
    StringVisitor::<ResponseHeaderName>("an HTTP header name", PhantomData)
);
