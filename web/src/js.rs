//! Small bridges to the browser's JavaScript: awaiting a promise, naming a thrown value, and
//! waiting on the page's clock.

use std::time::Duration;

use js_sys::{Function, Promise};
use leptos::prelude::{set_timeout, GetValue, StoredValue, UpdateValue};
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

/// Waits for `promise`: its value, or its rejection as `Err`.
pub async fn settle(promise: &Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(promise.clone()).await
}

/// A JavaScript error as text for people: an `Error`'s message, a thrown string, or its shape.
pub fn describe(value: &JsValue) -> String {
    if let Some(error) = wasm_bindgen::JsCast::dyn_ref::<js_sys::Error>(value) {
        return String::from(error.message());
    }
    value.as_string().unwrap_or_else(|| format!("{value:?}"))
}

/// Waits `ms` milliseconds of the page's clock. Unlike a microtask tick, this lets the browser
/// run its own tasks (painting, input, file reads) before the caller goes on.
pub async fn sleep(ms: i32) {
    let promise = Promise::new(&mut |resolve: Function, _reject: Function| {
        if let Some(window) = web_sys::window() {
            let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = settle(&promise).await;
}

/// Gives the browser its turn (painting, input, the next file read) and comes back as soon as
/// it has had it. A message posted to ourselves is a task of its own, run after what the browser
/// has waiting; a timer set from a timer's task, as `sleep(0)` in a loop is, is held back to
/// 4 ms after the fifth (the HTML standard's clamp), which cost a file read in 20 ms slices a
/// sixth of its time.
pub async fn yield_now() {
    let Ok(channel) = web_sys::MessageChannel::new() else {
        return sleep(0).await;
    };
    let promise = Promise::new(&mut |resolve: Function, _reject: Function| {
        channel.port1().set_onmessage(Some(&resolve));
        if channel.port2().post_message(&JsValue::NULL).is_err() {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = settle(&promise).await;
    // Held until the message came: a channel let go with a message on its way may be collected.
    channel.port1().set_onmessage(None);
}

/// Runs work once things have stopped changing for `delay`: each [`Debounce::call`] cancels
/// the one before it that has not run yet. For what should follow a burst of changes (a pan
/// redraws every frame) once, when it ends.
#[derive(Clone, Copy)]
pub struct Debounce {
    generation: StoredValue<u64>,
    delay: Duration,
}

impl Debounce {
    pub fn new(delay: Duration) -> Debounce {
        Debounce { generation: StoredValue::new(0), delay }
    }

    /// Runs `work` after the delay, unless another call comes first (or the page is gone).
    pub fn call(&self, work: impl FnOnce() + 'static) {
        let generation = self.generation;
        generation.update_value(|g| *g += 1);
        let mine = generation.get_value();
        set_timeout(
            move || {
                if generation.try_get_value() == Some(mine) {
                    work();
                }
            },
            self.delay,
        );
    }
}

#[cfg(all(test, target_arch = "wasm32"))]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    #[wasm_bindgen_test]
    async fn a_promise_settles_either_way() {
        let ok = settle(&Promise::resolve(&JsValue::from(7))).await;
        assert_eq!(ok.ok().and_then(|v| v.as_f64()), Some(7.0));
        let error = js_sys::Error::new("no such file");
        let err = settle(&Promise::reject(&error)).await.unwrap_err();
        assert_eq!(describe(&err), "no such file");
        sleep(1).await;
    }
}
