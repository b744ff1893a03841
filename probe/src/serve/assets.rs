//! The web app's files. The `ackscope` binary embeds them at build time (build.rs writes the
//! list, src/main.rs includes it and hands it to [`install`]): only the binary, so a rebuilt web
//! app relinks the binary instead of recompiling this library.

use std::sync::OnceLock;

pub struct Asset {
    /// Path below the site root, without a leading slash: "index.html".
    pub path: &'static str,
    pub bytes: &'static [u8],
}

static SITE: OnceLock<&'static [Asset]> = OnceLock::new();

/// The files to serve, set once at start (a second call is ignored). Without it the server
/// serves [`NOT_BUILT_PAGE`].
pub fn install(assets: &'static [Asset]) {
    let _ = SITE.set(assets);
}

fn site() -> &'static [Asset] {
    SITE.get().copied().unwrap_or(&[])
}

/// Served at `/` when the binary was built without the web app.
pub const NOT_BUILT_PAGE: &str = "<!doctype html><meta charset=utf-8><title>ackscope</title>\
<h1>ackscope</h1><p>This binary was built without its web app. Build both with \
<code>cargo xtask run</code> from the repository. The command line works without it: \
<code>ackscope run rr --count 200 --size 2048</code>.</p>";

pub fn find(path: &str) -> Option<&'static Asset> {
    let path = path.trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    site().iter().find(|asset| asset.path == path)
}

pub fn is_built() -> bool {
    find("index.html").is_some()
}

pub fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        // instantiateStreaming() requires this exact type.
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}
