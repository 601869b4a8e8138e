//! A JSON value reader that refuses duplicate object keys, and the front door's reading of a
//! message with it ([`Top`]): the envelope's members straight into an [`Envelope`], and the
//! 2026-07-28 per-request fields out of `params._meta` into a [`PerRequest`].

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use serde_json::value::RawValue;

use crate::jsonrpc::{Envelope, Member};
use crate::mcp::methods;
use crate::pass_through::RawArguments;
use crate::revision_2026::{meta, PerRequest, PROTOCOL_VERSION};

pub(crate) struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(Strict)
    }
}

/// The visits of a value that is not an object, as [`Strict`] reads them, for the visitors
/// below that treat only objects (or only strings) specially; `$wrap` turns the value into
/// the visitor's own.
macro_rules! as_strict {
    ($wrap:expr) => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Strict.visit_bool(v).map($wrap)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Strict.visit_i64(v).map($wrap)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Strict.visit_u64(v).map($wrap)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Strict.visit_f64(v).map($wrap)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Strict.visit_unit().map($wrap)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            Strict.visit_seq(seq).map($wrap)
        }
    };
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Strict)?;
            insert(&mut object, key, value)?;
        }
        Ok(Value::Object(object))
    }
}

/// Inserts a member; one lookup a key: the entry is vacant unless the key came before.
fn insert<E: de::Error>(object: &mut Map<String, Value>, key: String, value: Value) -> Result<(), E> {
    match object.entry(key) {
        serde_json::map::Entry::Vacant(slot) => {
            slot.insert(value);
            Ok(())
        }
        serde_json::map::Entry::Occupied(taken) => Err(duplicate(taken.key())),
    }
}

fn duplicate<E: de::Error>(key: &str) -> E {
    let shown: String = key.chars().take(64).collect();
    de::Error::custom(format!("duplicate key {shown:?} in an object"))
}

/// Fills a member read once; a second time is a duplicate key.
fn once<T, E: de::Error>(slot: &mut Option<T>, key: &str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(duplicate(key));
    }
    *slot = Some(value);
    Ok(())
}

/// A value read for the checks alone (no key twice in an object, at any depth): nothing
/// is built but each object's list of keys, borrowed from the text unless escaped.
struct Checked;

impl<'de> DeserializeSeed<'de> for Checked {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Checked)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys: Vec<Cow<'de, str>> = Vec::new();
        while let Some(key) = map.next_key_seed(KeyText)? {
            map.next_value_seed(Checked)?;
            keys.push(key);
        }
        // A few keys are compared each with each; many, sorted (fewer comparisons).
        if keys.len() <= 8 {
            for (i, key) in keys.iter().enumerate() {
                if keys[..i].contains(key) {
                    return Err(duplicate(key));
                }
            }
        } else {
            keys.sort_unstable();
            if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
                return Err(duplicate(&pair[0]));
            }
        }
        Ok(())
    }
}

/// A key's text: borrowed from the message unless it has escapes.
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Cow<'de, str>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// `seed` over a value already read as text (its syntax checked): what it finds wrong is
/// said where the text stood in the message, by the caller's error.
fn again<'de, S: DeserializeSeed<'de>, E: de::Error>(raw: &'de RawValue, seed: S) -> Result<S::Value, E> {
    let mut deserializer = serde_json::Deserializer::from_str(raw.get());
    seed.deserialize(&mut deserializer).map_err(|e| {
        let said = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        E::custom(said.strip_suffix(&position).unwrap_or(&said))
    })
}

/// A key compared with the names a visitor knows, without a copy unless it is another.
struct KeySeed(&'static [&'static str]);

enum Key {
    Known(usize),
    Other(String),
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        Ok(match self.0.iter().position(|k| *k == v) {
            Some(i) => Key::Known(i),
            None => Key::Other(v.to_owned()),
        })
    }
}

/// A string member checked against the text it must have (see [`Member`]).
struct Expect(&'static str);

impl<'de> DeserializeSeed<'de> for Expect {
    type Value = Member;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Member, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Expect {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Member, E> {
        Ok(if v == self.0 { Member::Expected } else { Member::Other(Value::String(v.to_owned())) })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Member, A::Error> {
        Strict.visit_map(map).map(Member::Other)
    }

    as_strict!(Member::Other);
}

/// What the front door reads: a message's members, or (for anything but an object) the
/// value, for [`super::Message::parse`] to say what is wrong with it. One lives on the
/// stack per message read; boxing the envelope would cost an allocation for nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Parsed {
    Envelope(Envelope),
    Other(Value),
}

/// The message, with the per-request fields of `params._meta` going to the [`PerRequest`]
/// and a `tools/call`'s passable `arguments` to `arguments`.
pub(crate) struct Top<'a> {
    pub(crate) fields: &'a mut PerRequest,
    pub(crate) arguments: &'a mut Option<RawArguments>,
}

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = Parsed;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Parsed, D::Error> {
        deserializer.deserialize_any(self)
    }
}

const ENVELOPE: &[&str] = &["jsonrpc", "id", "method", "params", "result", "error"];

impl<'de> Visitor<'de> for Top<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_str<E>(self, v: &str) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::String(v.to_owned())))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut envelope = Envelope::default();
        // Members the envelope does not use are read (checked) and dropped; their names
        // are kept only to find a duplicate (in a set: a body may hold many).
        let mut others: std::collections::HashSet<String> = std::collections::HashSet::new();
        while let Some(key) = map.next_key_seed(KeySeed(ENVELOPE))? {
            let name = match key {
                Key::Known(i) => ENVELOPE[i],
                Key::Other(name) => {
                    map.next_value_seed(Strict)?;
                    if others.contains(&name) {
                        return Err(duplicate(&name));
                    }
                    others.insert(name);
                    continue;
                }
            };
            match name {
                "jsonrpc" => once(&mut envelope.jsonrpc, name, map.next_value_seed(Expect("2.0"))?)?,
                "id" => once(&mut envelope.id, name, map.next_value_seed(Strict)?)?,
                "method" => once(&mut envelope.method, name, map.next_value_seed(Strict)?)?,
                "params" => {
                    if envelope.params.is_some() {
                        return Err(duplicate(name));
                    }
                    let call = matches!(&envelope.method, Some(Value::String(m)) if m == methods::TOOLS_CALL);
                    let arguments = call.then_some(&mut *self.arguments);
                    envelope.params = Some(map.next_value_seed(Params { fields: &mut *self.fields, arguments })?);
                }
                "result" => once(&mut envelope.result, name, map.next_value_seed(Strict)?)?,
                _ => once(&mut envelope.error, name, map.next_value_seed(Strict)?)?,
            }
        }
        Ok(Parsed::Envelope(envelope))
    }

    as_strict!(Parsed::Other);
}

/// `params`: its `_meta` read by [`Meta`]; `arguments`, when there is a place for them,
/// kept as written if they can be passed on so.
struct Params<'a> {
    fields: &'a mut PerRequest,
    arguments: Option<&'a mut Option<RawArguments>>,
}

impl<'de> DeserializeSeed<'de> for Params<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Params<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Params { fields, mut arguments } = self;
        let mut object = Map::new();
        let mut seen_meta = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "_meta" {
                if seen_meta {
                    return Err(duplicate(&key));
                }
                seen_meta = true;
                if let Some(value) = map.next_value_seed(Meta(&mut *fields))? {
                    insert(&mut object, key, value)?;
                }
                continue;
            }
            if let (Some(slot), "arguments") = (arguments.as_deref_mut(), key.as_str()) {
                // Read as text first (its syntax checked), then checked strictly without
                // building a tree; arguments that cannot pass as written become one.
                let raw: &'de RawValue = map.next_value()?;
                if slot.is_some() || object.contains_key(&key) {
                    return Err(duplicate(&key));
                }
                if RawArguments::passable(raw) {
                    again(raw, Checked)?;
                    *slot = Some(RawArguments::checked(raw));
                } else {
                    insert(&mut object, key, again(raw, Strict)?)?;
                }
                continue;
            }
            let value = map.next_value_seed(Strict)?;
            insert(&mut object, key, value)?;
        }
        Ok(Value::Object(object))
    }

    as_strict!(std::convert::identity);
}

/// `params._meta`: the version, capabilities and client info go to the [`PerRequest`];
/// `None` when nothing else was in it.
struct Meta<'a>(&'a mut PerRequest);

impl<'de> DeserializeSeed<'de> for Meta<'_> {
    type Value = Option<Value>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Option<Value>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

const FIELDS: &[&str] = &[meta::PROTOCOL_VERSION, meta::CLIENT_CAPABILITIES, meta::CLIENT_INFO];

impl<'de> Visitor<'de> for Meta<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<Value>, E> {
        Ok(Some(Value::String(v.to_owned())))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let fields = self.0;
        let mut object = Map::new();
        let mut taken = false;
        while let Some(key) = map.next_key_seed(KeySeed(FIELDS))? {
            match key {
                Key::Known(0) => {
                    let version = map.next_value_seed(Expect(PROTOCOL_VERSION))?;
                    once(&mut fields.version, FIELDS[0], version)?;
                }
                Key::Known(1) => once(&mut fields.capabilities, FIELDS[1], map.next_value_seed(Strict)?)?,
                Key::Known(_) => once(&mut fields.client_info, FIELDS[2], map.next_value_seed(Strict)?)?,
                Key::Other(key) => {
                    let value = map.next_value_seed(Strict)?;
                    insert(&mut object, key, value)?;
                    continue;
                }
            }
            taken = true;
        }
        Ok(if taken && object.is_empty() { None } else { Some(Value::Object(object)) })
    }

    as_strict!(Some);
}
