//! The web app's files, embedded at build time (see build.rs).

pub struct Asset {
    /// Path below the site root, without a leading slash: "index.html".
    pub path: &'static str,
    pub bytes: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// Served at `/` when the binary was built without the web app.
pub const NOT_BUILT_PAGE: &str = "<!doctype html><meta charset=utf-8><title>ackscope</title>\
<h1>ackscope</h1><p>This binary was built without its web app. Build both with \
<code>cargo xtask run</code> from the repository. The command line works without it: \
<code>ackscope run rr --count 200 --size 2048</code>.</p>";

pub fn find(path: &str) -> Option<&'static Asset> {
    let path = path.trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    ASSETS.iter().find(|asset| asset.path == path)
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
