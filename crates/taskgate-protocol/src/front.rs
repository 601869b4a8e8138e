//! The front door's reading of a client's message: strict (no key twice), with the 2026-07-28
//! per-request fields and a `tools/call`'s arguments kept apart from the params as they are read.

use crate::jsonrpc::{Message, MessageError};
use crate::pass_through::RawArguments;
use crate::revision_2026::PerRequest;
use crate::strict;

/// A message as the front door reads it ([`Message::from_slice_front`]): the message, the
/// 2026-07-28 per-request fields taken out of its `params._meta`, and a `tools/call`'s
/// `arguments` taken out of its `params` as the client wrote them.
pub type Front = (Message, PerRequest, Option<RawArguments>);

impl Message {
    /// [`Message::from_slice`], and a JSON object with the same key twice is a syntax error
    /// (RFC 8259 says names SHOULD be unique; which of two values counts is undefined, so the
    /// front door refuses to guess).
    pub fn from_slice_strict(bytes: &[u8]) -> Result<Result<Message, MessageError>, serde_json::Error> {
        Ok(Message::from_slice_front(bytes)?.map(|(mut message, fields, arguments)| {
            if let Message::Request { params, .. } | Message::Notification { params, .. } = &mut message {
                if let Some(arguments) = arguments {
                    arguments.restore(params);
                }
                fields.restore(params);
            }
            message
        }))
    }

    /// [`Message::from_slice_strict`] as the front door reads a body: the envelope's members are
    /// read straight into the message (no tree of the whole message is built), and the
    /// per-request fields of a 2026-07-28 request (basic "Per-request protocol fields": the
    /// version, the client's capabilities and info in `params._meta`) are taken out of `_meta`
    /// as they are read, into [`PerRequest`]; a `_meta` that held only those is left out. A
    /// message that is not served as 2026-07-28 gets them back with [`PerRequest::restore`].
    /// A `tools/call`'s `arguments` (when `method` comes before `params`, as clients write it)
    /// are kept as the client wrote them ([`RawArguments`]) when they can be passed on so; a
    /// path that needs them in the params puts them back with [`RawArguments::restore`].
    pub fn from_slice_front(bytes: &[u8]) -> Result<Result<Front, MessageError>, serde_json::Error> {
        use serde::de::DeserializeSeed;
        let mut fields = PerRequest::default();
        let mut arguments = None;
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let parsed = strict::Top { fields: &mut fields, arguments: &mut arguments }.deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(match parsed {
            strict::Parsed::Envelope(envelope) => envelope.into_message().map(|m| (m, fields, arguments)),
            strict::Parsed::Other(value) => Message::parse(value).map(|m| (m, fields, None)),
        })
    }
}
