//! Records as Redis holds them (JSON), and the parts of a key that come from names.

use crate::{StoreError, TaskRecord};

/// Hex of length-prefixed parts: any tenant or principal text makes a safe, unambiguous key.
pub(super) fn hex_parts(parts: &[&str]) -> String {
    let mut hex = String::new();
    for part in parts {
        for byte in (part.len() as u32).to_be_bytes().iter().chain(part.as_bytes()) {
            hex.push_str(&format!("{byte:02x}"));
        }
    }
    hex
}

pub(super) fn decode(text: &str) -> Result<TaskRecord, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Backend(format!("a stored task does not decode: {e}")))
}

pub(super) fn encode(record: &TaskRecord) -> String {
    serde_json::to_string(record).expect("a task record always encodes")
}
