//! Mounts the app; everything else lives in the library.
#![forbid(unsafe_code)]

fn main() {
    leptos::mount::mount_to_body(ackscope_web::app::App);
}
