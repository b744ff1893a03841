//! The WebSocket to the probe: connect, decode, hand over, reconnect. Nothing else.
//!
//! The probe serves this app and its WebSocket (`/ws`) from one origin. One binary WebSocket
//! message carries one encoded message (docs/PROTOCOL.md). When the socket closes we try again
//! every second; the probe answers a new connection with Hello and a replay of every run, so the
//! state is rebuilt from the stream rather than patched (see `state::apply`).

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

use ackscope_shared::wire::{decode_message, encode, ToBrowser, ToProbe, WireError};
use leptos::prelude::set_timeout;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use web_sys::{BinaryType, CloseEvent, MessageEvent, WebSocket};

/// How long to wait before reconnecting after the socket closed.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where the link to the probe is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkStatus {
    /// The first attempt is under way.
    Connecting,
    Connected,
    /// The socket closed (or never opened); the next attempt is at most a second away.
    Reconnecting,
}

impl LinkStatus {
    /// A word for people, also the `data-state` value.
    pub fn word(self) -> &'static str {
        match self {
            LinkStatus::Connecting => "connecting",
            LinkStatus::Connected => "connected",
            LinkStatus::Reconnecting => "reconnecting",
        }
    }
}

/// The probe's WebSocket address for a page served from `protocol` (`"http:"`) and `host`
/// (`"127.0.0.1:7878"`), as `window.location` gives them.
/// Where the page's requests to the probe go: the probe's [`Link`] in the app; tests pass one
/// that keeps what was sent. `Err` says why it was not sent.
pub type Outbox = Rc<dyn Fn(&ToProbe) -> Result<(), String>>;

pub fn probe_url(protocol: &str, host: &str) -> String {
    let scheme = if protocol == "https:" { "wss" } else { "ws" };
    format!("{scheme}://{host}/ws")
}

/// The address for the page this app was loaded from.
pub fn probe_url_for_this_page() -> Option<String> {
    let location = web_sys::window()?.location();
    let protocol = location.protocol().ok()?;
    // A page opened from disk (the offline build) has no server, so no probe to reach.
    (protocol != "file:").then(|| Some(probe_url(&protocol, &location.host().ok()?)))?
}

/// A connection to the probe that keeps itself up. Dropping the last clone closes the socket
/// and stops reconnecting.
#[derive(Clone)]
pub struct Link {
    inner: Rc<Inner>,
}

struct Inner {
    url: String,
    /// Asked at every connect: where to resume the stream (`/ws?resume=`), if anywhere.
    resume: Box<dyn Fn() -> Option<String>>,
    on_message: Box<dyn Fn(Result<ToBrowser, WireError>)>,
    on_status: Box<dyn Fn(LinkStatus)>,
    current: RefCell<Option<Socket>>,
}

/// A socket and the callbacks it calls. The callbacks must live as long as the socket can call
/// them, so they are kept here and dropped only after the socket's handlers are unset.
struct Socket {
    socket: WebSocket,
    _on_open: Closure<dyn FnMut()>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut(CloseEvent)>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.socket.set_onopen(None);
        self.socket.set_onmessage(None);
        self.socket.set_onclose(None);
        // Closing an already closed socket is a no-op; the result says nothing we can act on.
        let _ = self.socket.close();
    }
}

impl Link {
    /// Opens the link at `url`. `on_message` gets every message (or why it did not decode);
    /// `on_status` every change of [`LinkStatus`].
    pub fn open(
        url: String,
        resume: impl Fn() -> Option<String> + 'static,
        on_message: impl Fn(Result<ToBrowser, WireError>) + 'static,
        on_status: impl Fn(LinkStatus) + 'static,
    ) -> Link {
        let inner = Rc::new(Inner {
            url,
            resume: Box::new(resume),
            on_message: Box::new(on_message),
            on_status: Box::new(on_status),
            current: RefCell::new(None),
        });
        (inner.on_status)(LinkStatus::Connecting);
        connect(&inner);
        Link { inner }
    }

    /// Sends one message, or says why it could not.
    pub fn send(&self, message: &ToProbe) -> Result<(), String> {
        let current = self.inner.current.borrow();
        let socket = current
            .as_ref()
            .map(|current| &current.socket)
            .filter(|socket| socket.ready_state() == WebSocket::OPEN)
            .ok_or_else(|| "not connected to the probe: wait for it to reconnect".to_string())?;
        socket
            .send_with_u8_array(&encode(message))
            .map_err(|_| "the connection to the probe refused the message".to_string())
    }
}

fn connect(inner: &Rc<Inner>) {
    // Replacing the previous socket drops its handlers; it has closed, so it calls none.
    inner.current.replace(None);
    let url = with_resume(&inner.url, (inner.resume)().as_deref());
    let socket = match WebSocket::new(&url) {
        Ok(socket) => socket,
        Err(_) => {
            // A malformed URL cannot get better, but retrying keeps the status honest.
            retry_later(Rc::downgrade(inner));
            return;
        }
    };
    socket.set_binary_type(BinaryType::Arraybuffer);

    let weak = Rc::downgrade(inner);
    let on_open = Closure::<dyn FnMut()>::new(move || {
        if let Some(inner) = weak.upgrade() {
            (inner.on_status)(LinkStatus::Connected);
        }
    });
    let weak = Rc::downgrade(inner);
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
        let Some(inner) = weak.upgrade() else { return };
        // The protocol is binary only; a text message is not ours to interpret.
        let Ok(buffer) = event.data().dyn_into::<js_sys::ArrayBuffer>() else {
            return;
        };
        let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
        (inner.on_message)(decode_message(&bytes));
    });
    let weak = Rc::downgrade(inner);
    let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |_: CloseEvent| {
        if let Some(inner) = weak.upgrade() {
            (inner.on_status)(LinkStatus::Reconnecting);
        }
        // A failed attempt fires `close` too (after `error`), so this one path covers both.
        retry_later(weak.clone());
    });
    socket.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    socket.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    socket.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    inner.current.replace(Some(Socket {
        socket,
        _on_open: on_open,
        _on_message: on_message,
        _on_close: on_close,
    }));
}

/// `url` asking to resume the stream at `point` (`ID.RUN.EVENTS.FINISHED`), after any query it
/// has (a class's room code).
fn with_resume(url: &str, point: Option<&str>) -> String {
    match point {
        Some(point) if url.contains('?') => format!("{url}&resume={point}"),
        Some(point) => format!("{url}?resume={point}"),
        None => url.to_string(),
    }
}

fn retry_later(weak: Weak<Inner>) {
    set_timeout(
        move || {
            if let Some(inner) = weak.upgrade() {
                connect(&inner);
            }
        },
        RETRY_AFTER,
    );
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn the_socket_is_on_the_page_origin() {
        assert_eq!(probe_url("http:", "127.0.0.1:7878"), "ws://127.0.0.1:7878/ws");
        let ws = "ws://127.0.0.1:7878/ws";
        assert_eq!(with_resume(ws, None), ws);
        assert_eq!(with_resume(ws, Some("7.1.20.0")), format!("{ws}?resume=7.1.20.0"));
        let room = format!("{ws}?room=ab12");
        assert_eq!(with_resume(&room, Some("7.1.20.0")), format!("{room}&resume=7.1.20.0"));
        assert_eq!(probe_url("https:", "lab.example:443"), "wss://lab.example:443/ws");
    }
}
