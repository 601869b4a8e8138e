//! Integration tests: the real gateway and real upstreams on 127.0.0.1:0, over real sockets.
//! One test binary (one link) with a module per area.

mod any_replica;
mod apps;
mod apps_examples;
mod browser;
mod cli;
mod conformance;
mod damaged_store;
mod federation;
mod front_door;
mod hostile;
mod interop;
mod interop_modern;
mod modern;
mod modern_upstreams;
mod oauth;
mod oauth_exchange;
mod offerings;
mod operations;
mod passing;
mod peers;
mod pooled_sessions;
mod progress;
mod prometheus;
mod python_upstream;
mod replicas;
mod restart;
mod rmcp_client;
mod rmcp_server;
mod served;
mod shared_sessions;
mod support;
mod tasks;
mod tenants;
mod upstream_decides;
mod upstreams;
