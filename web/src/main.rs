//! Mounts the app; everything else lives in the library.
#![forbid(unsafe_code)]

fn main() {
    // The same wasm decodes big files in a Web Worker (`decode_worker`), where there is no
    // page to mount on.
    if web_sys::window().is_none() {
        return;
    }
    leptos::mount::mount_to_body(ackscope_web::app::App);
}
