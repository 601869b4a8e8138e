use serde_json::{json, Value};
use taskgate_protocol::revision_2026::{meta as wmeta, methods as wmethods};
use taskgate_protocol::{ErrorObject, Message};

use super::headers::*;
use super::probe::*;
use std::sync::Arc;

#[test]
fn the_probe_tells_modern_from_legacy_and_concludes_nothing_from_auth_or_server_errors() {
    let discover = json!({"supportedVersions": ["2026-07-28", "2025-11-25"], "capabilities": {}});
    assert!(matches!(classify(Some(200), Some(Ok(discover))), Ok(Verdict::V2026(_))));
    // A legacy server that answers any method it does not know with an empty result.
    assert!(matches!(classify(Some(200), Some(Ok(json!({})))), Ok(Verdict::V2025(_))));
    assert!(matches!(classify(None, Some(Ok(json!({"supportedVersions": "2026-07-28"})))), Ok(Verdict::V2025(_))));
    // A modern server that speaks no version taskgate speaks is not one to fall back on.
    assert!(classify(Some(200), Some(Ok(json!({"supportedVersions": ["2027-01-01"]})))).is_err());
    let legacy = ErrorObject::new(-32000, "Bad Request: Server not initialized");
    assert!(matches!(classify(Some(400), Some(Err(legacy.clone()))), Ok(Verdict::V2025(_))));
    assert!(matches!(classify(Some(404), None), Ok(Verdict::V2025(_))));
    assert!(matches!(classify(Some(405), None), Ok(Verdict::V2025(_))));
    assert!(matches!(classify(None, Some(Err(ErrorObject::new(-32601, "no")))), Ok(Verdict::V2025(_))));
    assert!(matches!(classify(None, None), Ok(Verdict::V2025(_))));
    for status in [401, 403, 429, 500, 502, 503] {
        assert!(classify(Some(status), Some(Err(legacy.clone()))).is_err(), "{status}");
        assert!(classify(Some(status), None).is_err(), "{status}");
    }
    let unsupported = ErrorObject::new(-32022, "Unsupported protocol version")
        .with_data(json!({"supported": ["2027-01-01"], "requested": "2026-07-28"}));
    assert!(classify(Some(400), Some(Err(unsupported))).is_err());
    assert!(classify(Some(400), Some(Err(ErrorObject::new(-32020, "Header mismatch")))).is_err());
}

#[test]
fn header_values_are_plain_or_base64_as_the_encoding_rules_say() {
    assert_eq!(header_value("us-west1"), "us-west1");
    assert_eq!(header_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
    assert_eq!(header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
    assert_eq!(header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
    assert_eq!(header_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
}

#[test]
fn x_mcp_header_annotations_become_the_calls_headers() {
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry"}}},
        "query": {"type": "string"}
    }});
    let specs = param_headers(Some(&schema)).unwrap();
    assert_eq!(specs.len(), 2);
    let tools: ToolHeaders = Arc::default();
    tools.lock().insert("sql".into(), specs);
    let params = json!({"name": "sql", "arguments": {"region": "us-west1", "opts": {"dry": true}, "query": "x"}});
    let headers = request_headers("tools/call", &params, &tools);
    let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.to_str().unwrap().to_owned());
    assert_eq!(find("mcp-method").as_deref(), Some("tools/call"));
    assert_eq!(find("mcp-name").as_deref(), Some("sql"));
    assert_eq!(find("mcp-param-region").as_deref(), Some("us-west1"));
    assert_eq!(find("mcp-param-dry").as_deref(), Some("true"));
    let null = json!({"name": "sql", "arguments": {"region": null}});
    assert!(!request_headers("tools/call", &null, &tools).iter().any(|(k, _)| k == "mcp-param-region"));
    // Which annotations are invalid: taskgate_protocol::param_headers.
}

#[test]
fn modern_tasks_read_as_legacy_tasks() {
    let task = json!({"taskId": "t", "status": "completed", "createdAt": "a", "lastUpdatedAt": "b",
        "ttlMs": 60000, "pollIntervalMs": 500, "result": {"content": []}, "resultType": "complete"});
    assert_eq!(
        task_2025(&task),
        json!({"taskId": "t", "status": "completed", "createdAt": "a", "lastUpdatedAt": "b", "ttl": 60000, "pollInterval": 500})
    );
    assert_eq!(task_2025(&json!({"taskId": "t", "status": "working", "ttlMs": null}))["ttl"], Value::Null);
}

#[test]
fn listen_notifications_lose_the_subscription_id_and_the_acknowledgment_is_consumed() {
    let ack = Message::notification(wmethods::SUBSCRIPTIONS_ACKNOWLEDGED, Some(json!({"notifications": {}})));
    assert!(from_listen(ack).is_none());
    let note = Message::notification(
        "notifications/resources/updated",
        Some(json!({"_meta": {wmeta::SUBSCRIPTION_ID: 7}, "uri": "file:///a"})),
    );
    assert_eq!(
        from_listen(note),
        Some(Message::notification("notifications/resources/updated", Some(json!({"uri": "file:///a"}))))
    );
}
