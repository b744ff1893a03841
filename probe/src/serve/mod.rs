//! The UI server: the embedded web app over HTTP and the session over a WebSocket.
//!
//! Security defaults: the probe binds loopback only (see `cli`); a WebSocket upgrade is refused
//! unless its Origin is this probe's own page, so another site open in the same browser cannot
//! drive the probe; and the browser can only start runs against the probe's own echo server (a
//! spec has no address field), against an `ackscope server` given with its token, or watches of
//! this host's ports, which read what the kernel says of this host's sockets with this
//! process's privileges, as `ackscope watch` run by the same user would (docs/WATCH.md).

pub mod assets;
pub(crate) mod guard;
pub mod room;
pub mod session;

use std::net::SocketAddr;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use ackscope_shared::budget;
use ackscope_shared::spec::MAX_BROWSER_REQUESTS;
use ackscope_shared::wire::{self, Hello, Instruments, ResumePoint, ToBrowser, ToProbe};
use ackscope_shared::{Scenario, WatchSpec};
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use self::room::Room;
use self::session::Session;
use crate::scenario;
use crate::watch::Handed;

/// Browser messages are a few dozen bytes; anything near this is not ours.
const MAX_INCOMING_MESSAGE_BYTES: usize = 64 * 1024;
/// A page sends a message per click or key press; more than this in a second is not a person,
/// and the connection is closed.
const MAX_INCOMING_PER_SECOND: u32 = 50;
/// How long a page that finds its class full has to show it is the presenter's (its page sends
/// the secret as soon as it connects) before it is told the room is full.
const PRESENT_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// After Ctrl-C, the process ends this soon whatever is still open: with the exit's own time,
/// well within the 2 s ackscope promises for any load.
const STOP_WITHIN: std::time::Duration = std::time::Duration::from_millis(1500);

struct App {
    session: Arc<Session>,
    /// The origins of this probe's own page, e.g. "http://127.0.0.1:4044".
    own_origins: Vec<String>,
    /// The `Host` headers a request may carry, or `None` when the listener is not on loopback
    /// (its machine's names are not known; the room code guards a class there).
    own_hosts: Option<Vec<String>>,
    /// Sent with every response: by the middleware on the app's own, by the listener on those
    /// the HTTP library makes itself. Made once, at the start.
    security_headers: guard::SecurityHeaders,
    /// In a class (`ackscope class`): the room its pages share.
    room: Option<Arc<Room>>,
}

/// Serves the app on `listener` until Ctrl-C or SIGTERM, on a runtime of its own: the probe's
/// UI (`room` `None`) or a class's room, where every page follows the presenter (see [`room`]).
/// `ready` is called once Ctrl-C and SIGTERM are handled, to announce the address: whoever
/// reads it may stop the server at once.
pub fn run(
    listener: std::net::TcpListener,
    room: Option<Arc<Room>>,
    ready: impl FnOnce(),
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| format!("reading the bound address: {e}"))?;
    let session = Session::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    let served = runtime.block_on(async {
        listener.set_nonblocking(true).map_err(|e| format!("listener on {addr}: {e}"))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("listener on {addr}: {e}"))?;
        let stop = StopSignals::new().map_err(|e| format!("handling Ctrl-C: {e}"))?;
        ready();
        serve(listener, Arc::clone(&session), room, stop)
            .await
            .map_err(|e| format!("serving on {addr}: {e}"))
    });
    // A run's blocking thread ends within its current step: wait that long, not for ever; a
    // watch that tried options on the watched programs puts them back first, within the 2 s
    // from the Ctrl-C. A second Ctrl-C meanwhile ends the process at once, as it says.
    let within = match (session.tries_in_force(), STOPPING.get()) {
        (true, Some(stopping)) => {
            // SAFETY: signal(2) with the default disposition; no handler of ours runs after.
            unsafe {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
            }
            RESTORE_WITHIN.saturating_sub(stopping.elapsed())
        }
        _ => std::time::Duration::from_secs(1),
    };
    runtime.shutdown_timeout(within);
    served
}

async fn serve(
    listener: tokio::net::TcpListener,
    session: Arc<Session>,
    room: Option<Arc<Room>>,
    mut stop: StopSignals,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let own_hosts = addr.ip().is_loopback().then(|| own_hosts(addr));
    let security_headers = guard::security_headers(&content_security_policy());
    let runs = Arc::clone(&session);
    let app = Arc::new(App {
        session,
        own_origins: own_origins(addr),
        own_hosts,
        security_headers: Arc::clone(&security_headers),
        room,
    });
    let router = Router::new()
        .route("/ws", get(upgrade))
        .fallback(get(static_file))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&app), guard))
        .with_state(app);
    axum::serve(guard::GuardedListener::new(listener, security_headers), router)
        .with_graceful_shutdown(async move {
            stop.next().await;
            // Runs stop and keep what they recorded; a request still coming in (a slow page's
            // download) would hold a graceful shutdown, so the process ends STOP_WITHIN from
            // now whatever is left, and at once on a second Ctrl-C or SIGTERM.
            STOP_RUNS.store(true, Ordering::Relaxed);
            let stopping = *STOPPING.get_or_init(std::time::Instant::now);
            let restoring = runs.tries_in_force();
            match restoring {
                true => eprintln!(
                    "ackscope: stopping, putting back the options tried on the watched programs \
                     (Ctrl-C again to stop at once, leaving them as tried)"
                ),
                false => eprintln!("ackscope: stopping (Ctrl-C again to stop at once)"),
            }
            // A watch putting back what it tried gets the rest of the 2 s.
            let within = if restoring { RESTORE_WITHIN } else { STOP_WITHIN };
            tokio::spawn(async move {
                tokio::select! {
                    () = stop.next() => {}
                    () = tokio::time::sleep(within.saturating_sub(stopping.elapsed())) => {}
                }
                std::process::exit(130);
            });
        })
        .await
}

/// Ctrl-C and SIGTERM (what `kill` and service managers send), both asking the server to stop.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Until the next of either signal.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

fn own_origins(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut origins = vec![format!("http://{addr}")];
    if addr.ip().is_loopback() {
        origins.push(format!("http://localhost:{port}"));
        origins.push(format!("http://127.0.0.1:{port}"));
        origins.push(format!("http://[::1]:{port}"));
    }
    origins
}

/// The host names (any port) of this probe's own URLs on a loopback listener: anything else is
/// a page that resolved another name to 127.0.0.1 (DNS rebinding), refused.
pub(crate) fn own_hosts(addr: SocketAddr) -> Vec<String> {
    let bound = match addr {
        SocketAddr::V4(v4) => v4.ip().to_string(),
        SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
    };
    vec![bound, "127.0.0.1".into(), "localhost".into(), "[::1]".into()]
}

/// The name part of a `Host` header: "127.0.0.1:4044" -> "127.0.0.1", "[::1]:4044" -> "[::1]".
pub(crate) fn host_name(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon) if !host[colon..].contains(']') => &host[..colon],
        _ => host,
    }
}

/// The page's policy: its own scripts (the one inline boot script by hash) and WebAssembly,
/// styles, and fetches of session files (`?url=`, any http(s) origin) and its WebSocket;
/// framed only by its own origin; no plugins, no `<base>`, no form posts.
fn content_security_policy() -> String {
    let inline = assets::find("index.html")
        .and_then(|page| inline_script(page.bytes))
        .map(|script| {
            use base64::Engine;
            use sha2::Digest;
            let digest = sha2::Sha256::digest(script);
            format!(" 'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest))
        })
        .unwrap_or_default();
    format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'{inline}; style-src 'self' \
         'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self' http: https:; \
         frame-ancestors 'self'; base-uri 'none'; form-action 'none'; object-src 'none'"
    )
}

/// The text of the page's first inline `<script>` (the one that boots the app).
fn inline_script(page: &[u8]) -> Option<&[u8]> {
    let page = std::str::from_utf8(page).ok()?;
    let open = page.find("<script type=\"module\">")?;
    let body = &page[open + "<script type=\"module\">".len()..];
    let close = body.find("</script>")?;
    Some(&body.as_bytes()[..close])
}

/// Every request: refused unless its `Host` is this probe's own (on a loopback listener);
/// every response, a refusal too: the page's security headers (the listener adds them to the
/// answers the HTTP library makes itself, which never reach this). No answer repeats what the
/// request said, so none can carry a request's text into a page.
async fn guard(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok());
    let allowed = match &app.own_hosts {
        None => true,
        Some(own) => {
            host.is_some_and(|host| own.iter().any(|o| o.eq_ignore_ascii_case(host_name(host))))
        }
    };
    let mut response = if allowed {
        next.run(request).await
    } else {
        tracing::warn!("refused a request for Host {:?}", host.unwrap_or("(none)"));
        let reason = format!(
            "ackscope: this request's Host is not this probe's address; open {} (a page that \
             names 127.0.0.1 by another name is not let in)\n",
            app.own_origins[0]
        );
        (StatusCode::MISDIRECTED_REQUEST, reason).into_response()
    };
    for (name, value) in app.security_headers.iter() {
        response.headers_mut().insert(name, value.clone());
    }
    response
}

/// `Ok` if the request comes from this probe's own page.
fn check_origin(headers: &HeaderMap, own_origins: &[String]) -> Result<(), String> {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    match origin {
        Some(origin) if own_origins.iter().any(|own| own == origin) => Ok(()),
        Some(origin) => Err(format!(
            "WebSocket refused: Origin {origin} is not this probe's page ({}); open the probe's \
             own URL",
            own_origins[0]
        )),
        None => {
            Err("WebSocket refused: no Origin header; open the probe's page in a browser".into())
        }
    }
}

/// The `room=` of a query string.
fn room_code(uri: &Uri) -> Option<&str> {
    query_value(uri, "room")
}

/// The value of `name=` in the query string.
fn query_value<'a>(uri: &'a Uri, name: &str) -> Option<&'a str> {
    uri.query()?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

async fn upgrade(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    uri: Uri,
    ws: WebSocketUpgrade,
) -> Response {
    // The log says why; the answer repeats nothing of the request.
    let refuse = |logged: &str, answer: &str| {
        tracing::warn!("{logged}");
        (StatusCode::FORBIDDEN, format!("ackscope: {answer}\n")).into_response()
    };
    let mut origins = app.own_origins.clone();
    if let Some(room) = &app.room {
        // A class's pages come from whatever address the students were given; the room code
        // (the token) is what lets them in.
        if room_code(&uri) != Some(room.code.as_str()) {
            let reason = "WebSocket refused: this is a class; open the link with its room code";
            return refuse(reason, reason);
        }
        if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
            origins.push(format!("http://{host}"));
        }
    }
    if let Err(reason) = check_origin(&headers, &origins) {
        let answer = format!(
            "WebSocket refused: the page asking is not this probe's own (its Origin is missing \
             or another site's); open {}",
            app.own_origins[0]
        );
        return refuse(&reason, &answer);
    }
    let resume = query_value(&uri, "resume").and_then(ResumePoint::parse);
    ws.max_message_size(MAX_INCOMING_MESSAGE_BYTES)
        .on_upgrade(move |socket| stream_session(socket, app, resume))
}

/// The first message a page sends within `within`, if it is one of ours.
async fn first_message(socket: &mut WebSocket, within: std::time::Duration) -> Option<ToProbe> {
    let incoming = tokio::time::timeout(within, socket.recv()).await.ok()??;
    match incoming {
        Ok(Message::Binary(bytes)) => wire::decode::<ToProbe>(&bytes).ok(),
        _ => None,
    }
}

/// Sends the whole session, then whatever is appended, until the browser goes away. In a
/// class, also the room's state: now, and whenever the presenter moves.
async fn stream_session(mut socket: WebSocket, app: Arc<App>, resume: Option<ResumePoint>) {
    // The page's place in the room, given back when it goes. A full room still takes the
    // presenter's page, in the place kept for it, if the page's first message proves it is.
    let mut presenter = false;
    // Held, not read: dropping it gives the place back.
    let mut _seat = match app.room.as_deref().map(|room| (room, room.enter())) {
        None => None,
        Some((_, Ok(seat))) => Some(seat),
        Some((room, Err(reason))) => {
            let first = first_message(&mut socket, PRESENT_WITHIN).await;
            let proved =
                matches!(first, Some(ToProbe::Present { secret }) if room.is_presenter(&secret));
            let Some(seat) = proved.then(|| room.seat_presenter()).flatten() else {
                tracing::warn!("{reason}");
                let _ = send(&mut socket, &ToBrowser::Rejected { reason }).await;
                return;
            };
            presenter = true;
            Some(seat)
        }
    };
    let mut room_changed = app.room.as_ref().map(|room| room.subscribe());
    // The class's votes: the presenter's page hears of every vote, a student's only of what its
    // page shows (the question, its round, the revealed counts).
    let mut votes_changed =
        app.room.as_ref().map(|room| (room.subscribe_votes(), room.subscribe_shown_votes()));
    // A page is told the room's state and its votes when it joins (and the votes again when it
    // becomes the presenter's), then as they change.
    let (mut state_due, mut votes_due) = (true, true);
    let mut vote_rate = room::VoteRate::new(std::time::Instant::now());
    let mut window = (std::time::Instant::now(), 0u32);
    let mut changed = app.session.subscribe();
    // A page whose stream was cut gets only what it has not had, if it was this stream.
    let resumed = resume.and_then(|point| app.session.cursor_at(point));
    let stream = ToBrowser::Stream { id: app.session.id(), resumed: resumed.is_some() };
    let mut cursor = resumed.unwrap_or_default();
    let hello = Hello::current(env!("CARGO_PKG_VERSION"), crate::host::facts());
    // Whether this page may try a stall's fix on the programs a watch watches: its buttons show
    // only then, and otherwise say what is missing. In a class, the presenter's page alone.
    let rights = |presenter: bool| ToBrowser::TryRights {
        refused: match (&app.room, presenter) {
            (Some(_), false) => Some("in a class the presenter tries the fixes".into()),
            _ => crate::watch::tune::rights().err(),
        },
    };
    if send(&mut socket, &ToBrowser::Hello(hello)).await.is_err()
        || send(&mut socket, &stream).await.is_err()
        || send(&mut socket, &rights(presenter)).await.is_err()
    {
        return;
    }
    loop {
        changed.borrow_and_update();
        // The session's own buffers, a few at a time: a page that does not read waits here on
        // one of them, holding no copy of the session.
        let messages = app.session.catch_up(&mut cursor);
        let more = messages.len() == session::MESSAGES_PER_CATCH_UP;
        for message in messages {
            if send_encoded(&mut socket, message).await.is_err() {
                return;
            }
        }
        // The room's state follows the session's messages, once they are all sent: when the
        // page joins and whenever the presenter moves (not at every batch of a live run).
        if let Some(watch) = room_changed.as_mut().filter(|_| !more) {
            let (state, due) = newest(watch, &mut state_due);
            if let Some(state) = state.filter(|_| due) {
                if send(&mut socket, &ToBrowser::ClassState(state)).await.is_err() {
                    return;
                }
            }
        }
        if let Some((all, shown)) = votes_changed.as_mut().filter(|_| !more) {
            let (votes, due) = newest(if presenter { all } else { shown }, &mut votes_due);
            if let Some(votes) = votes.filter(|_| due) {
                if send(&mut socket, &ToBrowser::ClassVotes(votes)).await.is_err() {
                    return;
                }
            }
        }
        let room_moved = async {
            match room_changed.as_mut() {
                Some(watch) => watch.changed().await,
                None => std::future::pending().await,
            }
        };
        let room_voted = async {
            match votes_changed.as_mut() {
                Some((all, _)) if presenter => all.changed().await,
                Some((_, shown)) => shown.changed().await,
                None => std::future::pending().await,
            }
        };
        let incoming = tokio::select! {
            incoming = socket.recv() => incoming,
            // The rest of the backlog, with the page's own messages still read between.
            () = std::future::ready(()), if more => continue,
            changed = changed.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
            // `changed` marks the new value seen: it is due for sending all the same.
            moved = room_moved => match moved {
                Ok(()) => {
                    state_due = true;
                    continue;
                }
                Err(_) => return,
            },
            voted = room_voted => match voted {
                Ok(()) => {
                    votes_due = true;
                    continue;
                }
                Err(_) => return,
            },
        };
        let bytes = match incoming {
            Some(Ok(Message::Binary(bytes))) => bytes,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
            Some(Ok(_)) => continue,
        };
        if window.0.elapsed() >= std::time::Duration::from_secs(1) {
            window = (std::time::Instant::now(), 0);
        }
        window.1 += 1;
        if window.1 > MAX_INCOMING_PER_SECOND {
            tracing::warn!(
                "a page sent more than {MAX_INCOMING_PER_SECOND} messages in a second; closed"
            );
            return;
        }
        let was_presenter = presenter;
        let reply = match (wire::decode::<ToProbe>(&bytes), &app.room) {
            (Ok(ToProbe::StartRun { .. }), Some(_)) if !presenter => Some(
                "in a class the presenter starts the runs; they appear here as they run".into(),
            ),
            (Ok(ToProbe::StartRemoteRun { .. }), Some(_)) if !presenter => Some(
                "in a class the presenter starts the runs; they appear here as they run".into(),
            ),
            (Ok(ToProbe::StartRun { spec }), _) => {
                start_run(&app.session, spec, scenario::Target::Local).err()
            }
            (Ok(ToProbe::StartRemoteRun { spec, server, token }), _) => {
                start_run(&app.session, spec, scenario::Target::Remote { server, token }).err()
            }
            (Ok(ToProbe::StopRun), Some(_)) if !presenter => {
                Some("in a class the presenter's runs are stopped by the presenter".into())
            }
            (Ok(ToProbe::StopRun), _) => app.session.stop_running().err(),
            (Ok(ToProbe::TryOnWatch { .. }), Some(_)) if !presenter => {
                Some("in a class the presenter tries the fixes".into())
            }
            (Ok(ToProbe::TryOnWatch { run, option, sides }), _) => {
                let option = crate::watch::tune::Try { knob: option, sides };
                crate::watch::tune::rights()
                    .and_then(|()| app.session.try_on_watch(run, option))
                    .err()
            }
            (Ok(ToProbe::Present { secret }), Some(room)) => {
                let was = presenter;
                presenter = room.is_presenter(&secret);
                if presenter && !was {
                    // To the place kept for it, if free; the student's place it held goes back.
                    if let Some(kept) = room.seat_presenter() {
                        _seat = Some(kept);
                    }
                }
                (!presenter).then(|| {
                    "this link's presenter secret is not this room's; use the presenter link \
                     `ackscope class` printed"
                        .into()
                })
            }
            (Ok(ToProbe::ClassState(state)), Some(room)) if presenter => room.set(state).err(),
            (Ok(ToProbe::ClassState(_)), Some(_)) => {
                Some("only the presenter moves the room; follow it or explore freely".into())
            }
            (Ok(ToProbe::Vote { .. }), Some(_)) if presenter => {
                Some("the presenter's page does not vote; the students' pages do".into())
            }
            (Ok(ToProbe::Vote { lesson, step, round, choice }), Some(room)) => {
                match (!vote_rate.take(std::time::Instant::now()), &_seat) {
                    (true, _) => Some(format!(
                        "more than {} votes in a second: this one was not taken; your last one \
                         counts",
                        room::VOTES_PER_SECOND
                    )),
                    (false, Some(seat)) => room.vote(seat.page, &lesson, step, round, choice).err(),
                    (false, None) => Some("this page has no place in the room".into()),
                }
            }
            (Ok(ToProbe::Present { .. } | ToProbe::ClassState(_) | ToProbe::Vote { .. }), None) => {
                Some("this probe is not serving a class; start one with `ackscope class`".into())
            }
            (Err(e), _) => Some(format!("could not read the request ({e}); reload the page")),
        };
        if let Some(reason) = reply {
            if send(&mut socket, &ToBrowser::Rejected { reason }).await.is_err() {
                return;
            }
        }
        if presenter != was_presenter {
            votes_due = true;
            if send(&mut socket, &rights(presenter)).await.is_err() {
                return;
            }
        }
    }
}

async fn send(socket: &mut WebSocket, message: &ToBrowser) -> Result<(), axum::Error> {
    send_encoded(socket, wire::encode(message).into()).await
}

/// A room's newest value, and whether the page is due it: it was `due` (the page joined, or a
/// wait for a change took the change), or the value is one the page has not seen. Whether it
/// was seen is read in the same borrow that marks it seen: a value sent between a check and a
/// borrow would be marked seen and never sent.
fn newest<T: Clone>(watch: &mut tokio::sync::watch::Receiver<T>, due: &mut bool) -> (T, bool) {
    let value = watch.borrow_and_update();
    let due = std::mem::take(due) || value.has_changed();
    (value.clone(), due)
}

/// Sends an encoded message; returns once the page's socket took it, so a page that does not
/// read holds one message here, never a queue of them.
async fn send_encoded(socket: &mut WebSocket, payload: Bytes) -> Result<(), axum::Error> {
    socket.send(Message::Binary(payload)).await
}

/// Set by Ctrl-C: every browser-started run stops after its current step, keeping what it
/// recorded.
static STOP_RUNS: AtomicBool = AtomicBool::new(false);
/// When the first Ctrl-C (or SIGTERM) came.
static STOPPING: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
/// After Ctrl-C, how long a watch that tried options on the watched programs has to put them
/// back before the process ends: within the 2 s ackscope promises for any load.
const RESTORE_WITHIN: std::time::Duration = std::time::Duration::from_millis(1800);

/// Limits of a run started from the browser, each named in its refusal or its outcome. The
/// command line has none of these: there the user chose the run, and its file streams to disk.
pub mod limits {
    use std::time::Duration;
    /// Events a browser run keeps in memory (every tab, late ones too, gets them all), once,
    /// encoded: about 50 MB of syscall events. A run that reaches it stops, keeping them.
    pub const MAX_EVENTS: u64 = 5_000_000;
    /// Bytes a browser run may move: requests x (request + answer) x connections, or a bulk
    /// transfer's bytes.
    pub const MAX_BYTES: u64 = 16 << 30;
    /// Smallest read buffer of a browser bulk run: a 1-byte buffer makes two events per byte.
    pub const MIN_APP_BUFFER_BYTES: u32 = 1024;
    /// How long a browser run may last.
    pub const MAX_DURATION: Duration = Duration::from_secs(600);
}

/// Why `spec` is refused as a browser run, naming the limit; `None` if it is within them all.
fn beyond_browser_limits(spec: &Scenario) -> Option<String> {
    let cli = "use the command line (ackscope run) for larger runs";
    let refusal = match spec {
        Scenario::Rr(rr) if rr.requests > MAX_BROWSER_REQUESTS => Some(format!(
            "requests: runs started from the browser make at most {MAX_BROWSER_REQUESTS}; {cli}"
        )),
        Scenario::Rr(rr) => {
            let per_request = u64::from(rr.size_bytes) + u64::from(rr.response_size());
            let bytes = u64::from(rr.requests) * per_request;
            (bytes > limits::MAX_BYTES).then(|| {
                format!(
                    "requests x (size + response size) is {bytes} bytes; runs started from the \
                     browser move at most {} ({} GiB); {cli}",
                    limits::MAX_BYTES,
                    limits::MAX_BYTES >> 30
                )
            })
        }
        Scenario::Bulk(bulk) if bulk.bytes > limits::MAX_BYTES => Some(format!(
            "bytes: runs started from the browser move at most {} ({} GiB); {cli}",
            limits::MAX_BYTES,
            limits::MAX_BYTES >> 30
        )),
        Scenario::Bulk(bulk) if bulk.app_buffer_bytes < limits::MIN_APP_BUFFER_BYTES => {
            Some(format!(
                "app buffer: runs started from the browser read at least {} bytes at a time \
                 (each read is two events); {cli}",
                limits::MIN_APP_BUFFER_BYTES
            ))
        }
        Scenario::Server(_) | Scenario::Import(_) => Some(
            "the browser starts rr and bulk runs and watches; run `ackscope server` for a \
             standalone echo server"
                .into(),
        ),
        _ => None,
    };
    // Then its buffers, in the words the command line uses too (`shared::budget`).
    refusal.or_else(|| {
        let whose = "a run started from the browser";
        let refused = budget::check(spec, budget::BROWSER_LIMIT_BYTES, whose, str::to_string);
        let cli = budget::COMMAND_LINE_LIMIT_BYTES >> 30;
        refused.err().map(|refusal| format!("{refusal} (the command line allows up to {cli} GiB)"))
    })
}

/// Starts a run on a blocking thread; its events reach every tab through the session. It stops
/// early, keeping what it recorded, at Ctrl-C, at [`limits::MAX_EVENTS`] events or after
/// [`limits::MAX_DURATION`], and its outcome says which.
pub fn start_run(
    session: &Arc<Session>,
    spec: Scenario,
    target: scenario::Target,
) -> Result<(), String> {
    let (spec, instruments) = match spec {
        Scenario::Watch(_) if target != scenario::Target::Local => {
            return Err("a watch is of this host's ports: start it without a server".into())
        }
        Scenario::Watch(watch) => {
            let (watch, instruments) = watch_on_this_host(watch)?;
            (Scenario::Watch(watch), instruments)
        }
        other => (other, Instruments::default()),
    };
    spec.validate().map_err(|e| e.to_string())?;
    if let Some(refusal) = beyond_browser_limits(&spec) {
        return Err(refusal);
    }
    let (run, stop) = session.begin_stoppable_run(spec.clone(), instruments)?;
    // A watch takes the fixes its pages try on the programs it watches.
    let tries = matches!(spec, Scenario::Watch(_)).then(|| session.take_tries(run));
    let session = Arc::clone(session);
    tokio::task::spawn_blocking(move || {
        let ended = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (stop, ended) = (Arc::clone(&stop), Arc::clone(&ended));
            std::thread::spawn(move || watch_browser_run(&stop, &ended))
        };
        // Across a watch's runs too: the watch is one source, bounded as one run.
        let mut events = 0u64;
        let mut too_many = false;
        let mut append = |run, batch: Vec<ackscope_shared::Event>| {
            events += batch.len() as u64;
            if events >= limits::MAX_EVENTS && !too_many {
                too_many = true;
                stop.store(true, Ordering::Relaxed);
            }
            session.append(run, batch)
        };
        // The run going on: a watch that tries a fix ends its run there and goes on in the next.
        let mut current = run;
        let outcome = match (&spec, &tries) {
            (Scenario::Watch(watch), Some(tries)) => {
                scenario::watch_for_a_page(watch, &stop, tries, |handed| match handed {
                    Handed::Events(batch) => append(current, batch),
                    Handed::Tried { tried, split: true } => {
                        current = session.split_run(current, spec.clone(), instruments, tried);
                    }
                    Handed::Tried { tried, split: false } => session.tried(current, tried),
                })
            }
            _ => {
                let mut notes = scenario::RunNotes::default();
                scenario::run_against(&spec, instruments, &target, &stop, &mut notes, |batch| {
                    append(run, batch)
                })
                .unwrap_or_else(|e| wire::RunOutcome::Failed { error: e.to_string() })
            }
        };
        ended.store(true, Ordering::Relaxed);
        let timed_out = watchdog.join().unwrap_or(false);
        let outcome = match outcome {
            wire::RunOutcome::Interrupted if too_many => wire::RunOutcome::Failed {
                error: format!(
                    "stopped at {} events, the most a run started from the browser keeps; what \
                     it recorded is kept (the command line streams longer runs to a file)",
                    limits::MAX_EVENTS
                ),
            },
            wire::RunOutcome::Interrupted if timed_out => wire::RunOutcome::Failed {
                error: format!(
                    "stopped after {} s, the longest a run started from the browser lasts; what \
                     it recorded is kept",
                    limits::MAX_DURATION.as_secs()
                ),
            },
            other => other,
        };
        session.finish(current, outcome);
    });
    Ok(())
}

/// A page's watch as it will run, before it is announced, so that the session records what the
/// watch really is: a process's ports found (`pid:N` comes with none), the ports checked, and
/// what this process can see of them, with the instruments that says. The error is the
/// refusal, in words that name the fix.
fn watch_on_this_host(mut watch: WatchSpec) -> Result<(WatchSpec, Instruments), String> {
    use crate::watch::watcher::Watcher;
    if let Some(pid) = watch.pid {
        watch.ports.extend(crate::watch::process::ports_of(pid)?);
    }
    watch.ports.sort_unstable();
    watch.ports.dedup();
    watch.validate().map_err(|e| format!("watch: {}", e.problem))?;
    // What the watch can see: the packet sockets are opened and closed again here, and the
    // run opens its own (`scenario::run_against`, the one path of a page's runs). That costs a
    // few milliseconds once; CAP_NET_RAW does not come or go while this process runs, so the
    // run sees what is announced (if opening them fails the second time, the run fails,
    // saying why).
    let evidence = Watcher::open(&watch.ports, crate::net::record::Clock::start())
        .map(|watcher| watcher.evidence.clone())
        .map_err(|e| format!("watch: {e}"))?;
    watch.evidence = evidence.describe();
    Ok((watch, evidence.instruments()))
}

/// Until `ended`: stops the run at Ctrl-C, or at [`limits::MAX_DURATION`] (returns true then).
fn watch_browser_run(stop: &AtomicBool, ended: &AtomicBool) -> bool {
    let started = std::time::Instant::now();
    while !ended.load(Ordering::Relaxed) {
        if STOP_RUNS.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
            return false;
        }
        if started.elapsed() >= limits::MAX_DURATION {
            stop.store(true, Ordering::Relaxed);
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

async fn static_file(uri: Uri) -> Response {
    match assets::find(uri.path()) {
        Some(asset) => (
            [
                (header::CONTENT_TYPE, assets::content_type(asset.path)),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            asset.bytes,
        )
            .into_response(),
        None if !assets::is_built() && uri.path() == "/" => {
            ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], assets::NOT_BUILT_PAGE)
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "ackscope: no such page\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_origin(origin: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        headers
    }

    #[test]
    fn browser_runs_beyond_a_limit_are_refused_by_name() {
        use ackscope_shared::{BulkSpec, RrSpec};
        assert_eq!(beyond_browser_limits(&Scenario::Rr(RrSpec::default())), None);
        assert_eq!(beyond_browser_limits(&Scenario::Bulk(BulkSpec::default())), None);
        let huge = Scenario::Bulk(BulkSpec { bytes: 1 << 40, ..BulkSpec::default() });
        let refused = beyond_browser_limits(&huge).unwrap();
        assert!(refused.starts_with("bytes:") && refused.contains("16 GiB"), "{refused}");
        let tiny = Scenario::Bulk(BulkSpec { app_buffer_bytes: 1, ..BulkSpec::default() });
        assert!(beyond_browser_limits(&tiny).unwrap().starts_with("app buffer:"));
        let many =
            Scenario::Rr(RrSpec { requests: 100_000, size_bytes: 64 << 20, ..RrSpec::default() });
        let refused = beyond_browser_limits(&many).unwrap();
        assert!(refused.contains("requests x (size + response size)"), "{refused}");
    }

    #[test]
    fn a_host_header_is_this_probe_only_by_its_loopback_names() {
        let own = own_hosts("127.0.0.1:4044".parse().unwrap());
        let allowed = |host: &str| own.iter().any(|o| o.eq_ignore_ascii_case(host_name(host)));
        for host in ["127.0.0.1:4044", "127.0.0.1", "localhost:4044", "LOCALHOST", "[::1]:4044"] {
            assert!(allowed(host), "{host}");
        }
        for host in ["evil.example", "evil.example:4044", "127.0.0.1.evil.example:4044", "[::2]"] {
            assert!(!allowed(host), "{host}");
        }
    }

    #[test]
    fn only_the_probes_own_page_may_open_the_websocket() {
        let own = own_origins("127.0.0.1:4044".parse().unwrap());
        assert!(check_origin(&with_origin("http://127.0.0.1:4044"), &own).is_ok());
        assert!(check_origin(&with_origin("http://localhost:4044"), &own).is_ok());
        let evil = check_origin(&with_origin("http://evil.example"), &own).unwrap_err();
        assert!(evil.contains("evil.example"), "{evil}");
        assert!(check_origin(&with_origin("http://127.0.0.1:9999"), &own).is_err());
        assert!(check_origin(&HeaderMap::new(), &own).is_err());
    }
}
