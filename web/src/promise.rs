//! A JavaScript promise as a Rust future: the little of `wasm-bindgen-futures` this app needs
//! (reading a file, fetching a URL), without another crate in the build.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use js_sys::Promise;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsValue;

/// Resolves to the promise's value, or to its rejection as `Err`.
pub struct Settled {
    slot: Rc<RefCell<Slot>>,
    /// JavaScript calls one of these when the promise settles; they must live until then.
    _callbacks: [Closure<dyn FnMut(JsValue)>; 2],
}

#[derive(Default)]
struct Slot {
    result: Option<Result<JsValue, JsValue>>,
    waker: Option<Waker>,
}

/// Waits for `promise`.
pub fn settle(promise: &Promise) -> Settled {
    let slot = Rc::new(RefCell::new(Slot::default()));
    let callback = |fulfilled: bool| {
        let slot = Rc::clone(&slot);
        Closure::<dyn FnMut(JsValue)>::new(move |value: JsValue| {
            let waker = {
                let mut slot = slot.borrow_mut();
                slot.result = Some(if fulfilled { Ok(value) } else { Err(value) });
                slot.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        })
    };
    let callbacks = [callback(true), callback(false)];
    // The promise `then` returns settles with ours; nothing waits for it.
    let _ = promise.then2(&callbacks[0], &callbacks[1]);
    Settled { slot, _callbacks: callbacks }
}

impl Future for Settled {
    type Output = Result<JsValue, JsValue>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.slot.borrow_mut();
        match slot.result.take() {
            Some(result) => Poll::Ready(result),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A JavaScript error as text for people: an `Error`'s message, a thrown string, or its shape.
pub fn describe(value: &JsValue) -> String {
    if let Some(error) = wasm_bindgen::JsCast::dyn_ref::<js_sys::Error>(value) {
        return String::from(error.message());
    }
    value.as_string().unwrap_or_else(|| format!("{value:?}"))
}

#[cfg(test)]
pub mod tests {
    use js_sys::Function;
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    /// Waits `ms` milliseconds of the page's clock: lets the browser run its own tasks (file
    /// reads, fetches), which a microtask tick does not.
    pub async fn sleep(ms: i32) {
        let promise = Promise::new(&mut |resolve: Function, _reject: Function| {
            web_sys::window()
                .expect("a window")
                .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
                .expect("setTimeout");
        });
        let _ = settle(&promise).await;
    }

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
