//! The operator's view: a JSON API (`/admin/api/...`) and a live page (`/admin/`), served on
//! the admin listener (and on the main one only with `admin.on_main_listener`), to the
//! operators of `[[admin.key]]` only.
//!
//! - [`api`]: sessions, tasks, upstreams, the store; ending a session, cancelling a task,
//!   restarting an upstream's processes. Every action is audited (`taskgate::audit`).
//! - [`page`]: the page, rendered here, and its snapshots over SSE.
//!
//! An operator authenticates with `Authorization: Bearer TOKEN` (the CLI, scripts) or HTTP
//! Basic with its name and token (a browser asks for them). A change (POST) from a browser must
//! come from the page itself: a request another site makes the browser send (its `Origin` or
//! `Sec-Fetch-Site` says so) is refused, since a browser repeats Basic credentials on its own.

mod api;
mod auth;
mod page;

use actix_web::web;

/// The most snapshot streams of the page open at once, per listener.
const MAX_PAGE_STREAMS: usize = 32;

/// What a listener's admin pages share (their streams and the snapshot they all send): made
/// once per listener, outside its workers' apps.
pub struct Shared(web::Data<page::Pages>);

impl Shared {
    pub fn new() -> Shared {
        Shared(web::Data::new(page::Pages::new(MAX_PAGE_STREAMS)))
    }

    /// Adds the admin routes to an app.
    pub fn routes(&self) -> impl Fn(&mut web::ServiceConfig) + Clone {
        let pages = self.0.clone();
        move |config: &mut web::ServiceConfig| {
            config
                .app_data(pages.clone())
                .route("/admin", web::get().to(page::redirect))
                .route("/admin/", web::get().to(page::page))
                .route("/admin/events", web::get().to(page::events))
                .route("/admin/api/sessions", web::get().to(api::sessions))
                .route("/admin/api/tasks", web::get().to(api::tasks))
                .route("/admin/api/upstreams", web::get().to(api::upstreams))
                .route("/admin/api/store", web::get().to(api::store))
                .route("/admin/api/sessions/{id}/end", web::post().to(api::end_session))
                .route("/admin/api/tasks/{id}/cancel", web::post().to(api::cancel_task))
                .route("/admin/api/upstreams/{name}/restart", web::post().to(api::restart_upstream));
        }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared::new()
    }
}
