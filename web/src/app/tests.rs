//! The whole page in a real browser: what a person sees as messages arrive and as they act.

use ackscope_shared::wire::RunOutcome;
use ackscope_shared::BulkSpec;
use ackscope_shared::{NoDelay, RunId};
use js_sys::{Array, Uint8Array};
use leptos::mount::mount_to;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::wasm_bindgen_test;
use web_sys::{
    DataTransfer, DragEvent, DragEventInit, Element, File, HtmlElement, HtmlInputElement,
    HtmlSelectElement,
};

use std::cell::RefCell;

use ackscope_shared::presets::{Preset, PRESETS};
use ackscope_shared::wire::{Instruments, ToBrowser, ToProbe};
use ackscope_shared::{RrSpec, Scenario};
use leptos::prelude::*;

use super::*;
use crate::files::blob_of;
use crate::fixtures::dom::{all, settle};
use crate::fixtures::{hello, nagle_run, rr_started, MS, US};
use crate::js::sleep;
use crate::session_file::DOWNLOAD_NAME;
use crate::state::{apply, AppState};
use crate::store::Store;

/// A fresh element in the body for one test's view.
fn container() -> HtmlElement {
    let document = document();
    let element = document.create_element("div").expect("create a div");
    document.body().expect("a body").append_child(&element).expect("append");
    element.unchecked_into()
}

fn one(root: &Element, selector: &str) -> Element {
    root.query_selector(selector).expect("a valid selector").unwrap_or_else(|| {
        panic!("no {selector} in {}", root.inner_html());
    })
}

fn text(root: &Element, selector: &str) -> String {
    one(root, selector).text_content().unwrap_or_default()
}

/// The text a label renders (what WebDriver's `text()` reads): its text, with no tooltip in it.
fn shown_text(label: &Element) -> String {
    assert!(label.query_selector("title").ok().flatten().is_none(), "the tooltip is an attribute");
    label.text_content().unwrap_or_default()
}

/// An element's tooltip: its `title` attribute.
fn tooltip(element: &Element) -> String {
    element.get_attribute("title").unwrap_or_default()
}

/// A count the plot reports about what it painted (`data-stalled-marks`, `data-waited-marks`).
fn painted(root: &Element, attribute: &str) -> usize {
    let plot = one(root, "[data-testid=plot]");
    plot.get_attribute(attribute).and_then(|n| n.parse().ok()).unwrap_or_else(|| {
        panic!("the plot has no {attribute}");
    })
}

/// Pixels of the stall red on the timeline's canvas: what a person sees, not what the DOM says.
fn red_pixels(root: &Element) -> usize {
    let canvas: web_sys::HtmlCanvasElement =
        one(root, "[data-testid=plot] canvas").unchecked_into();
    let context: web_sys::CanvasRenderingContext2d =
        canvas.get_context("2d").expect("a context").expect("a 2d context").unchecked_into();
    let (w, h) = (f64::from(canvas.width()), f64::from(canvas.height()));
    let data = context.get_image_data(0.0, 0.0, w, h).expect("readable pixels").data();
    data.chunks(4).filter(|px| px[0] == 0xd6 && px[1] == 0x28 && px[2] == 0x28).count()
}

#[wasm_bindgen_test]
async fn the_real_app_mounts_with_its_form_and_run_button() {
    let body = document().body().expect("a body");
    let mounted = mount_to(body.clone(), App);
    settle().await;
    // The app is mounted last in the body (other tests' pages may still be above it).
    let app = all(&body, ".app").pop().expect("the app's element");
    let root: &Element = &app;
    assert_eq!(text(root, "h1"), "ackscope");
    let run = one(root, "button[data-testid=run]");
    assert_eq!(run.text_content().as_deref().map(str::trim), Some("Run"));
    // No probe behind the test server: Run waits for one.
    assert!(run.has_attribute("disabled"));
    let link = one(root, "[data-testid=connection]").get_attribute("data-state");
    assert!(matches!(link.as_deref(), Some("connecting" | "reconnecting")), "{link:?}");
    let value = |id: &str| {
        one(root, &format!("input[data-testid={id}]")).unchecked_into::<HtmlInputElement>()
    };
    assert_eq!(value("requests").value(), "200");
    assert_eq!(value("size").value(), "2048");
    assert_eq!(value("reconnect-every").value(), "0");
    assert!(!value("nodelay-client").checked());
    assert!(!value("nodelay-server").checked());
    assert_eq!(value("response-size").value(), "", "the same as the request");
    assert_eq!(value("think-us").value(), "0");
    for id in ["cork-client", "cork-server", "quickack-client", "quickack-server"] {
        assert!(!value(id).checked(), "{id}");
    }
    for id in ["write-client", "write-server"] {
        let select = one(root, &format!("select[data-testid={id}]"));
        assert_eq!(select.unchecked_into::<HtmlSelectElement>().value(), "split");
    }
    assert!(one(root, "input[type=file][data-testid=open-file]").has_attribute("multiple"));
    assert!(
        one(root, "button[data-testid=download]").has_attribute("disabled"),
        "nothing to download before the probe's Hello"
    );
    drop(mounted);
    assert!(body.query_selector("[data-testid=run]").ok().flatten().is_none(), "unmounted");
}

#[wasm_bindgen_test]
async fn a_run_streams_into_rows_stall_labels_and_the_summary() {
    let store = Store::new(AppState::default());
    let root = container();
    let status = RwSignal::new(LinkStatus::Connected);
    let _mounted = mount_to(root.clone(), move || {
        view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
    });
    let root: &Element = &root;
    store.update(|s| {
        apply(s, hello());
        apply(s, rr_started(1, RrSpec { requests: 3, ..RrSpec::default() }));
    });
    settle().await;
    assert_eq!(all(root, "[data-testid=run-entry]").len(), 1);
    assert!(one(root, "button[data-testid=run]").has_attribute("disabled"), "a run is going");

    // Half the run: the rows of requests begun so far appear before the run ends.
    let events = nagle_run(3, 43_700 * US);
    let (first, rest) = events.split_at(20);
    store.update(|s| apply(s, ToBrowser::Events { run: RunId(1), events: first.to_vec() }));
    settle().await;
    let reqs: Vec<String> = all(root, "[data-testid=request-row]")
        .iter()
        .filter_map(|row| row.get_attribute("data-req"))
        .collect();
    assert_eq!(reqs, ["0", "1"]);
    assert_eq!(text(root, "[data-testid=summary-requests]"), "1");

    store.update(|s| {
        apply(s, ToBrowser::Events { run: RunId(1), events: rest.to_vec() });
        apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
    });
    settle().await;
    assert_eq!(all(root, "[data-testid=request-row]").len(), 3);
    let labels = all(root, "[data-testid=stall-label]");
    assert_eq!(labels.len(), 4, "two per request after the first");
    for label in &labels {
        assert_eq!(label.get_attribute("data-stall-ms").as_deref(), Some("43.7"));
        assert_eq!(shown_text(label), "43.7 ms");
    }
    assert_eq!(all(root, "[data-req='0'] [data-testid=stall-label]").len(), 0);
    assert_eq!(painted(root, "data-stalled-marks"), 4);
    assert!(red_pixels(root) > 1000, "the held reads are painted red");
    assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
    assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "4");
    assert_eq!(text(root, "[data-testid=summary-max-ms]"), "87.43");
    let rps = text(root, "[data-testid=summary-rps]");
    assert!(rps.parse::<f64>().is_ok() && rps.split('.').nth(1).map(str::len) == Some(1), "{rps}");
    let entry = one(root, "[data-testid=run-entry]");
    assert!(entry.text_content().unwrap_or_default().contains("done"));
    assert!(!one(root, "button[data-testid=run]").has_attribute("disabled"));

    // A second run with TCP_NODELAY on both sides: selected, and no stall anywhere.
    let nodelay = RrSpec {
        requests: 3,
        nodelay: NoDelay { client: true, server: true },
        ..RrSpec::default()
    };
    store.update(|s| {
        apply(s, rr_started(2, nodelay));
        apply(s, ToBrowser::Events { run: RunId(2), events: nagle_run(3, 30 * US) });
    });
    settle().await;
    let selected: Vec<Option<String>> = all(root, "[data-testid=run-entry]")
        .iter()
        .map(|e| {
            e.get_attribute("aria-selected")
                .filter(|s| s == "true")
                .and(e.get_attribute("data-run-id"))
        })
        .collect();
    assert_eq!(selected, [Some("2".to_string()), None], "newest first, newest selected");
    assert_eq!(all(root, "[data-testid=stall-label]").len(), 0);
    assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "0");
    assert_eq!(red_pixels(root), 0, "no red anywhere on the plot");

    // Back to the Nagle run by clicking it.
    let first_run = one(root, "[data-testid=run-entry][data-run-id='1']");
    first_run.unchecked_ref::<HtmlElement>().click();
    settle().await;
    let first_run = one(root, "[data-testid=run-entry][data-run-id='1']");
    assert_eq!(first_run.get_attribute("aria-selected").as_deref(), Some("true"));
    assert_eq!(all(root, "[data-testid=stall-label]").len(), 4);
    assert!(text(root, "[data-testid=summary-p50-ms]").starts_with("87."));
}

#[wasm_bindgen_test]
async fn every_request_of_a_long_run_is_reachable() {
    let store = Store::new(AppState::default());
    let root = container();
    let status = RwSignal::new(LinkStatus::Connected);
    let _mounted = mount_to(root.clone(), move || {
        view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
    });
    let spec = RrSpec { requests: 5000, ..RrSpec::default() };
    store.update(|s| {
        apply(s, hello());
        apply(s, rr_started(1, spec));
        apply(s, ToBrowser::Events { run: RunId(1), events: nagle_run(5000, 30 * US) });
    });
    settle().await;
    let root: &Element = &root;
    let rows = |root: &Element| -> Vec<String> {
        all(root, "[data-testid=request-row]")
            .iter()
            .filter_map(|r| r.get_attribute("data-req"))
            .collect()
    };
    assert_eq!(rows(root).len(), 20, "one page of rows is in the page, not 5000");
    assert_eq!(text(root, "[data-testid=row-range]"), "requests 1-20 of 5000 shown");
    assert_eq!(text(root, "[data-testid=summary-requests]"), "5000");

    // Go to the last request: its row is shown and selected, and the ladder is its.
    let goto: HtmlInputElement = one(root, "[data-testid=goto-request]").unchecked_into();
    goto.set_value("4999");
    let enter = web_sys::KeyboardEventInit::new();
    enter.set_key("Enter");
    let event = web_sys::KeyboardEvent::new_with_keyboard_event_init_dict("keydown", &enter)
        .expect("an event");
    goto.dispatch_event(&event).expect("dispatched");
    settle().await;
    assert!(rows(root).contains(&"4999".to_string()), "{:?}", rows(root));
    let selected = one(root, "[data-testid=request-row][aria-selected=true]");
    assert_eq!(selected.get_attribute("data-req").as_deref(), Some("4999"));
    let details = one(root, "[data-testid=selection]");
    assert_eq!(details.get_attribute("data-request").as_deref(), Some("4999"));
    assert!(details.query_selector("[data-testid=ladder]").ok().flatten().is_some());

    // A request that does not exist is named, and nothing moves.
    goto.set_value("5000");
    goto.dispatch_event(&event).expect("dispatched");
    settle().await;
    assert!(text(root, "[data-testid=find-message]").contains("no request 5000"));
    assert_eq!(
        one(root, "[data-testid=selection]").get_attribute("data-request").as_deref(),
        Some("4999")
    );

    // The next-slowest button walks from the slowest down.
    one(root, "[data-testid=next-slowest]").unchecked_ref::<HtmlElement>().click();
    settle().await;
    let first: u32 = one(root, "[data-testid=selection]")
        .get_attribute("data-request")
        .and_then(|r| r.parse().ok())
        .expect("a request");
    one(root, "[data-testid=next-slowest]").unchecked_ref::<HtmlElement>().click();
    settle().await;
    let second: u32 = one(root, "[data-testid=selection]")
        .get_attribute("data-request")
        .and_then(|r| r.parse().ok())
        .expect("a request");
    assert_ne!(first, second);
    assert!(rows(root).contains(&second.to_string()), "the next slowest is scrolled into view");
}

#[wasm_bindgen_test]
async fn the_form_names_a_bad_field_and_shows_a_refusal() {
    let store = Store::new(AppState::default());
    store.update(|s| apply(s, hello()));
    let root = container();
    let status = RwSignal::new(LinkStatus::Connected);
    let _mounted = mount_to(root.clone(), move || {
        view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
    });
    let root: &Element = &root;
    let size = one(root, "input[data-testid=size]").unchecked_into::<HtmlInputElement>();
    size.set_value("0");
    let input = web_sys::Event::new("input").expect("an input event");
    size.dispatch_event(&input).expect("dispatch");
    one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
    settle().await;
    let error = one(root, "[data-testid=form-error]");
    assert_eq!(error.get_attribute("data-field").as_deref(), Some("size_bytes"));
    assert!(error
        .text_content()
        .unwrap_or_default()
        .starts_with("body size (bytes): must be between 1"));
    assert_eq!(size.get_attribute("aria-invalid").as_deref(), Some("true"));
    assert!(!store.read_untracked(|s| s.start_pending), "nothing was sent");

    store.update(|s| {
        apply(s, ToBrowser::Rejected { reason: "a run is already in progress".into() })
    });
    settle().await;
    assert_eq!(
        text(root, "[data-testid=rejected]"),
        "The probe refused: a run is already in progress"
    );
}

#[wasm_bindgen_test]
async fn a_probe_of_another_version_is_named() {
    let store = Store::new(AppState::default());
    let root = container();
    let status = RwSignal::new(LinkStatus::Connected);
    let _mounted = mount_to(root.clone(), move || {
        view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
    });
    let newer = ackscope_shared::wire::Hello {
        protocol_version: 99,
        ackscope_version: "9.9.9".into(),
        host: Default::default(),
    };
    store.update(|s| apply(s, ToBrowser::Hello(newer)));
    settle().await;
    let root: &Element = &root;
    assert!(text(root, "[data-testid=protocol-error]").contains("version 99"));
    assert!(one(root, "button[data-testid=run]").has_attribute("disabled"));
}

/// The page over `store`, in a fresh element, with the probe connected.
fn mount_page(store: Store) -> (HtmlElement, impl Sized) {
    let root = container();
    let status = RwSignal::new(LinkStatus::Connected);
    let mounted = mount_to(root.clone(), move || {
        view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
    });
    (root, mounted)
}

/// Waits (on the page's clock: file reads are tasks, not microtasks) until `selector` shows.
async fn wait_for(root: &Element, selector: &str) -> Element {
    for _ in 0..250 {
        if let Some(found) = root.query_selector(selector).expect("a valid selector") {
            settle().await;
            return found;
        }
        sleep(20).await;
    }
    panic!("no {selector} after 5 s in {}", root.inner_html());
}

/// Waits until a file's card is there and has finished reading (no progress bar left in it).
async fn wait_loaded(root: &Element, card: &str) -> Element {
    for _ in 0..250 {
        if let Some(found) = root.query_selector(card).expect("a valid selector") {
            if found.query_selector("[data-testid=load-progress]").expect("valid").is_none() {
                settle().await;
                return found;
            }
        }
        sleep(20).await;
    }
    panic!("{card} did not finish loading after 5 s in {}", root.inner_html());
}

fn type_into(input: &HtmlInputElement, value: &str) {
    input.set_value(value);
    let event = web_sys::Event::new("input").expect("an input event");
    input.dispatch_event(&event).expect("dispatch");
}

/// A session file as Download saves it: story 1, three requests, every body held 43.7 ms.
fn story1_file() -> Vec<u8> {
    let mut state = AppState::default();
    apply(&mut state, hello());
    apply(&mut state, rr_started(1, RrSpec { requests: 3, ..RrSpec::default() }));
    apply(&mut state, ToBrowser::Events { run: RunId(1), events: nagle_run(3, 43_700 * US) });
    apply(&mut state, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
    state.live.file_bytes().expect("a greeted session").to_vec()
}

fn file(bytes: &[u8], name: &str) -> File {
    let parts = Array::of1(&Uint8Array::from(bytes));
    File::new_with_u8_array_sequence(&parts, name).expect("a file")
}

fn transfer_of(file: &File) -> DataTransfer {
    let transfer = DataTransfer::new().expect("a DataTransfer");
    transfer.items().add_with_file(file).expect("add the file");
    transfer
}

#[wasm_bindgen_test]
async fn the_form_caps_requests_for_the_browser_and_keeps_the_per_side_knobs() {
    let store = Store::new(AppState::default());
    store.update(|s| apply(s, hello()));
    let (root, _mounted) = mount_page(store);
    let root: &Element = &root;
    let input = |id: &str| {
        one(root, &format!("input[data-testid={id}]")).unchecked_into::<HtmlInputElement>()
    };
    let run = || one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();

    type_into(&input("requests"), "100001");
    run();
    settle().await;
    let error = one(root, "[data-testid=form-error]");
    assert_eq!(error.get_attribute("data-field").as_deref(), Some("requests"));
    let message = error.text_content().unwrap_or_default();
    assert!(message.starts_with("requests: "), "{message}");
    assert!(message.contains("at most 100000"), "{message}");
    assert_eq!(input("requests").get_attribute("aria-invalid").as_deref(), Some("true"));

    type_into(&input("requests"), "10");
    type_into(&input("think-us"), "20000000");
    run();
    settle().await;
    let error = one(root, "[data-testid=form-error]");
    assert_eq!(error.get_attribute("data-field").as_deref(), Some("think_us"));
    assert_eq!(input("think-us").get_attribute("aria-invalid").as_deref(), Some("true"));
    assert_eq!(input("requests").get_attribute("aria-invalid").as_deref(), Some("false"));

    // Every knob set and valid: the form gets as far as sending (there is no probe here).
    type_into(&input("think-us"), "500");
    type_into(&input("response-size"), "4");
    input("cork-client").click();
    input("quickack-server").click();
    let write = one(root, "select[data-testid=write-client]").unchecked_into::<HtmlSelectElement>();
    write.set_value("writev");
    write
        .dispatch_event(&web_sys::Event::new("change").expect("a change event"))
        .expect("dispatch");
    run();
    settle().await;
    let error = one(root, "[data-testid=form-error]");
    assert_eq!(error.get_attribute("data-field").as_deref(), Some(""));
    assert!(error.text_content().unwrap_or_default().starts_with("no probe to talk to"));
    assert!(input("cork-client").checked() && input("quickack-server").checked());
    assert_eq!(write.value(), "writev");
}

#[wasm_bindgen_test]
async fn the_summary_names_instruments_and_machine_and_bulk_runs_are_listed() {
    let store = Store::new(AppState::default());
    let (root, _mounted) = mount_page(store);
    let root: &Element = &root;
    store.update(|s| {
        apply(s, hello());
        apply(s, rr_started(1, RrSpec::default()));
    });
    settle().await;
    assert_eq!(
        text(root, "[data-testid=instruments]"),
        "recording: events, TCP_INFO at syscalls, TCP_INFO every 1 ms while blocked"
    );
    let machine = one(root, "details[data-testid=machine]");
    assert!(!machine.has_attribute("open"), "unobtrusive: closed until asked");
    assert_eq!(text(root, "[data-testid=machine] summary"), "machine: linux 6.8.0-test cubic");
    let details = machine.text_content().unwrap_or_default();
    assert!(details.contains("4096 131072 6291456"), "{details}");
    assert!(details.contains("4096 16384 4194304"), "{details}");

    let bulk = BulkSpec::default();
    let quiet = Instruments {
        tcp_info_at_syscalls: false,
        tcp_info_interval_us: 0,
        ..Instruments::default()
    };
    let read = |at_ns| ackscope_shared::Event {
        at_ns,
        side: ackscope_shared::Side::Server,
        conn: ackscope_shared::ConnId(0),
        req: ackscope_shared::ReqId(0),
        kind: ackscope_shared::EventKind::ReadDone { bytes: 62_500 },
    };
    store.update(|s| {
        apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Interrupted });
        apply(
            s,
            ToBrowser::RunStarted {
                run: RunId(2),
                spec: Scenario::Bulk(bulk.clone()),
                instruments: quiet,
            },
        );
        apply(s, ToBrowser::Events { run: RunId(2), events: vec![read(5 * MS), read(10 * MS)] });
    });
    settle().await;
    let entry = one(root, "[data-testid=run-entry][data-run-id='2']");
    let listed = entry.text_content().unwrap_or_default();
    assert!(listed.contains(&bulk.describe()), "{listed}");
    assert!(listed.contains("100.0 Mbit/s"), "{listed}");
    let first = one(root, "[data-testid=run-entry][data-run-id='1'] .status");
    assert_eq!(first.get_attribute("data-status").as_deref(), Some("interrupted"));
    assert_eq!(text(root, "[data-testid=instruments]"), "recording: events");
    assert_eq!(
        text(root, "[data-testid=no-timeline]"),
        "Bulk runs have no per-request timeline yet."
    );
    assert!(all(root, "[data-testid=request-row]").is_empty());
    assert_eq!(text(root, "[data-testid=summary-bytes]"), "125000");
    assert_eq!(text(root, "[data-testid=summary-goodput-mbps]"), "100.0");
    assert_eq!(text(root, "[data-testid=summary-events]"), "2");
}

#[wasm_bindgen_test]
async fn a_picked_file_shows_its_runs_beside_the_live_ones() {
    let store = Store::new(AppState::default());
    store.update(|s| {
        apply(s, hello());
        apply(s, rr_started(7, RrSpec::default()));
    });
    let (root, _mounted) = mount_page(store);
    let root: &Element = &root;
    assert!(!one(root, "button[data-testid=download]").has_attribute("disabled"));

    let picker = one(root, "input[data-testid=open-file]").unchecked_into::<HtmlInputElement>();
    let transfer = transfer_of(&file(&story1_file(), "story1.ackscope"));
    picker.set_files(transfer.files().as_ref());
    picker
        .dispatch_event(&web_sys::Event::new("change").expect("a change event"))
        .expect("dispatch");
    let opened = wait_loaded(root, "[data-testid=opened-file]").await;
    assert_eq!(opened.get_attribute("data-file").as_deref(), Some("story1.ackscope"));
    assert!(root.query_selector("[data-testid=file-error]").ok().flatten().is_none());
    let entry = one(&opened, "[data-testid=run-entry]");
    assert_eq!(entry.get_attribute("data-source").as_deref(), Some("file"));
    assert_eq!(entry.get_attribute("data-run-id").as_deref(), Some("1"));
    assert_eq!(entry.get_attribute("aria-selected").as_deref(), Some("true"));
    assert_eq!(text(root, "[data-testid=summary-file]"), "from story1.ackscope");
    assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
    assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "4");
    assert_eq!(all(root, "[data-testid=stall-label]").len(), 4);
    assert_eq!(all(root, "[data-testid=run-entry][data-source=live]").len(), 1);

    // The probe restarts: its Hello starts the live runs over and leaves the file's alone.
    store.update(|s| apply(s, hello()));
    settle().await;
    assert!(all(root, "[data-testid=run-entry][data-source=live]").is_empty());
    assert_eq!(all(root, "[data-testid=run-entry][data-source=file]").len(), 1);
    assert_eq!(text(root, "[data-testid=summary-requests]"), "3");

    one(root, "button[data-testid=close-file]").unchecked_into::<HtmlElement>().click();
    settle().await;
    assert!(all(root, "[data-testid=opened-file]").is_empty());
}

#[wasm_bindgen_test]
async fn a_dropped_truncated_file_names_the_problem_and_keeps_the_runs_before_it() {
    let store = Store::new(AppState::default());
    let (root, _mounted) = mount_page(store);
    let root: &Element = &root;
    let whole = story1_file();
    // Cut inside the RunFinished frame: run 1 and all its events are before the cut.
    let transfer = transfer_of(&file(&whole[..whole.len() - 2], "cut.ackscope"));
    let init = DragEventInit::new();
    init.set_bubbles(true);
    init.set_cancelable(true);
    init.set_data_transfer(Some(&transfer));
    let drop = DragEvent::new_with_event_init_dict("drop", &init).expect("a drop event");
    // Dropped on a heading: anywhere on the page will do.
    one(root, "h1").dispatch_event(&drop).expect("dispatch");
    assert!(drop.default_prevented(), "the browser must not open the file itself");

    let error = wait_for(root, "[data-testid=file-error]").await;
    let error = error.text_content().unwrap_or_default();
    assert!(error.starts_with("cut.ackscope: stream ends inside a message at byte"), "{error}");
    assert!(error.contains("truncated"), "{error}");
    let entry = one(root, "[data-testid=opened-file] [data-testid=run-entry]");
    assert_eq!(entry.get_attribute("data-run-id").as_deref(), Some("1"));
    let status = one(&entry, ".status");
    assert_eq!(status.get_attribute("data-status").as_deref(), Some("incomplete"));
    assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
    assert_eq!(all(root, "[data-testid=request-row]").len(), 3);
}

#[wasm_bindgen_test]
async fn a_file_of_a_newer_protocol_is_refused_by_name() {
    use ackscope_shared::wire::{write_frame, Hello, PROTOCOL_VERSION};

    let store = Store::new(AppState::default());
    let (root, _mounted) = mount_page(store);
    let root: &Element = &root;
    let mut bytes = Vec::new();
    let newer = Hello {
        protocol_version: PROTOCOL_VERSION + 1,
        ackscope_version: "9.0.0".into(),
        host: Default::default(),
    };
    write_frame(&ToBrowser::Hello(newer), &mut bytes);
    write_frame(&rr_started(1, RrSpec::default()), &mut bytes);
    crate::files::open_blob(
        store,
        "future.ackscope".into(),
        file(&bytes, "future.ackscope").into(),
    );

    let error = wait_for(root, "[data-testid=file-error]").await;
    let error = error.text_content().unwrap_or_default();
    assert!(error.starts_with("future.ackscope: "), "{error}");
    assert!(error.contains(&format!("protocol version {}", PROTOCOL_VERSION + 1)), "{error}");
    assert!(error.contains(&format!("reads version {PROTOCOL_VERSION}")), "{error}");
    assert!(all(root, "[data-testid=run-entry]").is_empty());
}

#[wasm_bindgen_test]
async fn what_download_saves_opens_as_the_same_runs() {
    let store = Store::new(AppState::default());
    // A live session: story 1's messages as the probe streams them.
    let (messages, _) = crate::session_file::decode_session(&story1_file());
    store.update(|s| messages.into_iter().for_each(|message| apply(s, message)));
    let (root, _mounted) = mount_page(store);
    let root: &Element = &root;

    // What the Download button saves, read back through the same path as an opened file.
    let blob = store
        .read_untracked(|s| s.live.file_bytes().map(blob_of))
        .expect("a live session")
        .expect("a blob");
    crate::files::open_blob(store, DOWNLOAD_NAME.into(), blob);
    wait_loaded(root, &format!("[data-testid=opened-file][data-file='{DOWNLOAD_NAME}']")).await;
    store.read_untracked(|s| {
        let live = s.live.runs();
        let downloaded = &s.files().last().expect("opened").session;
        assert_eq!(downloaded.runs().len(), live.len());
        for (file_run, live_run) in downloaded.runs().iter().zip(live) {
            assert_eq!(file_run.spec, live_run.spec);
            assert_eq!(file_run.status, live_run.status);
            assert_eq!(file_run.summary(), live_run.summary());
        }
    });
    assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
}

/// The page over `store` with an outbox that keeps every message Run sends.
fn mount_recording(store: Store) -> (HtmlElement, impl Sized, Rc<RefCell<Vec<ToProbe>>>) {
    let sent = Rc::new(RefCell::new(Vec::new()));
    let keep = Rc::clone(&sent);
    let outbox: Outbox = Rc::new(move |message: &ToProbe| {
        keep.borrow_mut().push(message.clone());
        Ok(())
    });
    let root = container();
    let status = RwSignal::new(LinkStatus::Connected);
    let outbox = StoredValue::new_local(Some(outbox));
    let mounted = mount_to(root.clone(), move || {
        view! { <Page store link_status=status outbox /> }
    });
    (root, mounted, sent)
}

/// A live session with one finished rr run of `spec` made of `events`.
fn one_run(spec: RrSpec, events: Vec<ackscope_shared::Event>) -> Store {
    let store = Store::new(AppState::default());
    store.update(|s| {
        apply(s, hello());
        apply(s, rr_started(1, spec));
        apply(s, ToBrowser::Events { run: RunId(1), events });
        apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
    });
    store
}

/// (data-class, data-direction, data-count) of every class line.
fn class_lines_of(root: &Element) -> Vec<(String, String, String)> {
    all(root, "[data-testid=stall-class]")
        .iter()
        .map(|line| {
            let attr = |name| line.get_attribute(name).unwrap_or_default();
            (attr("data-class"), attr("data-direction"), attr("data-count"))
        })
        .collect()
}

fn owned(lines: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    lines.iter().map(|&(a, b, c)| (a.into(), b.into(), c.into())).collect()
}

#[wasm_bindgen_test]
async fn each_stall_is_named_under_the_summary_and_on_its_label() {
    let store = one_run(RrSpec { requests: 20, ..RrSpec::default() }, nagle_run(20, 43_600 * US));
    let (root, _mounted) = mount_page(store);
    let root: &Element = &root;
    settle().await;
    assert_eq!(
        class_lines_of(root),
        owned(&[
            ("nagle_delayed_ack", "client->server", "19"),
            ("nagle_delayed_ack", "server->client", "19"),
        ])
    );
    let line = one(root, "[data-testid=stall-class][data-direction='client->server']");
    assert_eq!(
        text(&line, ".sentence"),
        "19 stalls: Nagle x delayed ACK, client->server, median 43.6 ms"
    );
    let fixes: Vec<String> =
        all(&line, ".fixes li").iter().filter_map(|li| li.text_content()).collect();
    assert_eq!(fixes.len(), 4, "{fixes:?}");
    assert_eq!(fixes[0], "TCP_NODELAY on the client");
    assert!(fixes
        .iter()
        .any(|fix| fix == "TCP_QUICKACK on the server, set again after every read"));
    let answer = one(root, "[data-testid=stall-class][data-direction='server->client']");
    assert_eq!(text(&answer, ".fixes li"), "TCP_NODELAY on the server");

    let labels = all(root, "[data-testid=stall-label]");
    assert_eq!(labels.len(), 38);
    for label in &labels {
        assert_eq!(shown_text(label), "43.6 ms");
        assert_eq!(label.get_attribute("data-stall-ms").as_deref(), Some("43.6"));
        assert_eq!(label.get_attribute("data-class").as_deref(), Some("nagle_delayed_ack"));
        let why = tooltip(label);
        assert!(why.starts_with("Nagle x delayed ACK: the "), "{why}");
        assert!(why.contains("wrote 4 bytes, then 2048 bytes"), "{why}");
    }
    assert_eq!(all(root, "[data-req='5'] [data-testid=stall-label]").len(), 2);
    assert_eq!(painted(root, "data-stalled-marks"), 38);
    assert!(all(root, "[data-testid=wait-label]").is_empty());
}

#[wasm_bindgen_test]
async fn a_writer_with_nodelay_leaves_its_stalls_unexplained() {
    let spec = RrSpec {
        requests: 20,
        nodelay: NoDelay { client: true, server: false },
        ..RrSpec::default()
    };
    let (root, _mounted) = mount_page(one_run(spec, nagle_run(20, 43_600 * US)));
    let root: &Element = &root;
    settle().await;
    // Equal counts: shared orders the classes by name then.
    assert_eq!(
        class_lines_of(root),
        owned(&[
            ("nagle_delayed_ack", "server->client", "19"),
            ("unexplained", "client->server", "19"),
        ])
    );
    let line = one(root, "[data-testid=stall-class][data-class=unexplained]");
    assert!(text(&line, ".sentence").starts_with("19 stalls: unexplained, client->server"));
    assert_eq!(text(&line, ".fixes li"), "capture packets to see what the kernel did");

    let unexplained = all(root, "[data-testid=stall-label][data-class=unexplained]");
    assert_eq!(unexplained.len(), 19);
    for label in &unexplained {
        let why = tooltip(label);
        assert!(why.starts_with("unexplained: the server waited"), "{why}");
        assert!(why.contains("the client had TCP_NODELAY on"), "{why}");
        assert_eq!(shown_text(label), "43.6 ms");
    }
    let nagle = all(root, "[data-testid=stall-label][data-class=nagle_delayed_ack]");
    assert_eq!(nagle.len(), 19);
}

#[wasm_bindgen_test]
async fn server_think_time_is_a_labelled_wait_not_nothing() {
    use ackscope_shared::synthetic::Script;
    use ackscope_shared::{EventKind, Side};
    // Keep-alive, no Nagle: the client writes, the server thinks 30 ms, then answers.
    let mut script = Script::default();
    for req in 0..3u32 {
        let t = u64::from(req) * 40 * MS;
        script.event(t, Side::Client, req, EventKind::RequestStart);
        script.write(Side::Client, req, t, t + 5 * US, 4);
        script.write(Side::Client, req, t + 6 * US, t + 10 * US, 100);
        script.read(Side::Server, req, t, t + 20 * US, 4);
        script.read(Side::Server, req, t + 21 * US, t + 30 * US, 100);
        let answer = t + 30 * MS;
        script.write(Side::Server, req, answer, answer + 5 * US, 4);
        script.write(Side::Server, req, answer + 6 * US, answer + 10 * US, 100);
        script.read(Side::Client, req, t + 11 * US, answer + 10 * US, 4);
        script.read(Side::Client, req, answer + 11 * US, answer + 20 * US, 100);
        script.event(answer + 21 * US, Side::Client, req, EventKind::RequestDone);
    }
    let spec = RrSpec {
        requests: 3,
        size_bytes: 100,
        think_us: 30_000,
        nodelay: NoDelay { client: true, server: true },
        ..RrSpec::default()
    };
    let (root, _mounted) = mount_page(one_run(spec, script.events));
    let root: &Element = &root;
    settle().await;
    assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "0", "no read was held");
    assert!(all(root, "[data-testid=stall-label]").is_empty());
    assert_eq!(class_lines_of(root), owned(&[("server_think_time", "server->client", "3")]));
    let line = one(root, "[data-testid=stall-class]");
    assert!(text(&line, ".sentence").starts_with("3 stalls: server think time"));
    assert_eq!(text(&line, ".fixes li"), "make the server answer faster");

    let waits = all(root, "[data-testid=wait-label]");
    assert_eq!(waits.len(), 3, "one per request");
    for wait in &waits {
        assert_eq!(wait.get_attribute("data-class").as_deref(), Some("server_think_time"));
        assert_eq!(shown_text(wait), "server think time 30.0 ms");
        assert_eq!(wait.get_attribute("data-wait-ms").as_deref(), Some("30.0"));
        let why = tooltip(wait);
        assert!(
            why.starts_with("server think time: the server read the whole request, then spent"),
            "{why}"
        );
    }
    assert_eq!(painted(root, "data-waited-marks"), 3);
    assert_eq!(painted(root, "data-stalled-marks"), 0);
}

#[wasm_bindgen_test]
async fn stop_is_offered_while_a_run_is_going_and_sends_stop_run() {
    let store = Store::new(AppState::default());
    store.update(|s| apply(s, hello()));
    let (root, _mounted, sent) = mount_recording(store);
    let root: &Element = &root;
    let stop = || one(root, "button[data-testid=stop-run]").unchecked_into::<HtmlElement>();
    assert!(stop().hidden(), "nothing to stop");
    store.update(|s| apply(s, rr_started(1, RrSpec::default())));
    settle().await;
    assert!(!stop().hidden(), "a run is going");
    stop().click();
    settle().await;
    assert_eq!(sent.borrow().last(), Some(&ToProbe::StopRun));
}

#[wasm_bindgen_test]
async fn a_preset_fills_every_field_and_run_sends_its_spec() {
    use ackscope_shared::presets::find;

    let store = Store::new(AppState::default());
    store.update(|s| apply(s, hello()));
    let (root, _mounted, sent) = mount_recording(store);
    let root: &Element = &root;
    let input = |id: &str| {
        one(root, &format!("input[data-testid={id}]")).unchecked_into::<HtmlInputElement>()
    };
    let select = one(root, "select[data-testid=preset]").unchecked_into::<HtmlSelectElement>();
    assert_eq!(select.value(), "", "the defaults are no preset (story1 makes 100 requests)");
    let names: Vec<String> = all(root, "select[data-testid=preset] option")
        .iter()
        .filter_map(|option| option.get_attribute("value"))
        .collect();
    // Request/response presets first, then the others (bulk).
    let is_rr = |preset: &&Preset| matches!((preset.build)(), Scenario::Rr(_));
    let mut expected = vec![String::new()];
    expected.extend(PRESETS.iter().filter(is_rr).map(|preset| preset.name.to_string()));
    expected.extend(PRESETS.iter().filter(|p| !is_rr(p)).map(|p| p.name.to_string()));
    assert_eq!(names, expected, "custom, then every preset");
    let choose = |name: &str| {
        select.set_value(name);
        select
            .dispatch_event(&web_sys::Event::new("change").expect("a change event"))
            .expect("dispatch");
    };

    // A bad field first: choosing a preset replaces it and clears the error.
    type_into(&input("size"), "0");
    one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
    settle().await;
    assert!(root.query_selector("[data-testid=form-error]").ok().flatten().is_some());

    let cork = find("story1-cork").expect("a preset");
    choose("story1-cork");
    settle().await;
    assert!(input("cork-client").checked() && input("cork-server").checked());
    assert!(!input("nodelay-client").checked() && !input("nodelay-server").checked());
    assert_eq!(input("requests").value(), "100", "the preset sets requests too");
    assert_eq!(input("size").value(), "2048");
    assert_eq!(text(root, "[data-testid=preset-about]"), cork.about);
    assert!(root.query_selector("[data-testid=form-error]").ok().flatten().is_none());
    assert_eq!(select.value(), "story1-cork");

    one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
    settle().await;
    assert_eq!(*sent.borrow(), [ToProbe::StartRun { spec: (cork.build)() }]);
    store.update(|s| s.start_failed());

    // An edit that spells another preset shows that one...
    input("cork-server").click();
    settle().await;
    assert_eq!(select.value(), "story1-cork-client");
    // ...and one that spells none makes the form the user's own.
    type_into(&input("requests"), "20");
    settle().await;
    assert_eq!(select.value(), "");
    assert!(text(root, "[data-testid=preset-about]").starts_with("your own settings"));
    choose("story1-cork");
    settle().await;
    assert_eq!(input("requests").value(), "100");

    // A bulk preset is sent as it is; the request/response fields step aside.
    let bulk = PRESETS
        .iter()
        .find(|preset| matches!((preset.build)(), Scenario::Bulk(_)))
        .expect("a bulk preset");
    choose(bulk.name);
    settle().await;
    assert!(one(root, ".rr-fields").has_attribute("hidden"));
    let about = text(root, "[data-testid=preset-about]");
    assert!(about.starts_with(bulk.about), "{about}");
    assert!(about.contains(&format!("ackscope run {} --print-spec", bulk.name)), "{about}");
    one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
    settle().await;
    assert_eq!(sent.borrow().last(), Some(&ToProbe::StartRun { spec: (bulk.build)() }));
    store.update(|s| s.start_failed());

    // Back to custom: the fields are as they were.
    choose("");
    settle().await;
    assert!(!one(root, ".rr-fields").has_attribute("hidden"));
    assert_eq!(select.value(), "story1-cork", "the fields still spell story1-cork");
    assert!(input("cork-client").checked());
}

/// A key as the browser sends it to the focused plot.
fn press(target: &Element, code: &str, key: &str) {
    let init = web_sys::KeyboardEventInit::new();
    init.set_code(code);
    init.set_key(key);
    init.set_bubbles(true);
    let event = web_sys::KeyboardEvent::new_with_keyboard_event_init_dict("keydown", &init)
        .expect("a key event");
    target.dispatch_event(&event).expect("dispatched");
}

#[wasm_bindgen_test]
async fn keys_and_the_wheel_zoom_pan_scroll_and_step_through_stalls() {
    let spec = RrSpec { requests: 60, ..RrSpec::default() };
    let (root, _mounted) = mount_page(one_run(spec, nagle_run(60, 44 * MS)));
    let root: &Element = &root;
    settle().await;
    let plot = one(root, "[data-testid=plot]");
    let window = |plot: &Element| -> (u64, u64) {
        let text = plot.get_attribute("data-window").expect("a window");
        let mut parts = text.split(' ').map(|n| n.parse::<u64>().expect("a number"));
        (parts.next().expect("from"), parts.next().expect("to"))
    };
    let whole = window(&plot);
    assert_eq!(whole.0, 0);

    // W zooms in around the middle; D pans later; 0 goes back to the whole run.
    press(&plot, "KeyW", "w");
    settle().await;
    let zoomed = window(&plot);
    assert!(zoomed.1 - zoomed.0 < whole.1 - whole.0, "{zoomed:?} is narrower than {whole:?}");
    press(&plot, "KeyD", "d");
    settle().await;
    let panned = window(&plot);
    assert!(panned.0 > zoomed.0, "{panned:?} is later than {zoomed:?}");
    press(&plot, "Digit0", "0");
    settle().await;
    assert_eq!(window(&plot), whole);

    // Ctrl+wheel zooms at the cursor; a plain wheel scrolls the rows.
    let wheel = |ctrl: bool, delta_y: f64| {
        let init = web_sys::WheelEventInit::new();
        init.set_delta_y(delta_y);
        init.set_ctrl_key(ctrl);
        init.set_bubbles(true);
        init.set_cancelable(true);
        let event = web_sys::WheelEvent::new_with_event_init_dict("wheel", &init).expect("a wheel");
        plot.dispatch_event(&event).expect("dispatched");
    };
    wheel(true, -200.0);
    settle().await;
    assert!(window(&plot).1 - window(&plot).0 < whole.1 - whole.0, "Ctrl+wheel zoomed in");
    wheel(false, 300.0);
    settle().await;
    assert_eq!(text(root, "[data-testid=row-range]"), "requests 11-30 of 60 shown");

    // n steps to the first stall (request 1: quick ACK spares request 0), p back finds none.
    press(&plot, "KeyN", "n");
    settle().await;
    let selected = one(root, "[data-testid=selection]");
    assert_eq!(selected.get_attribute("data-request").as_deref(), Some("1"));
    assert!(all(root, "[data-testid=selection-stall]").len() == 2, "its two stalls are listed");
    press(&plot, "KeyP", "p");
    settle().await;
    assert!(text(root, "[data-testid=find-message]").contains("no stall before"));

    // ? lists the keys.
    press(&plot, "Slash", "?");
    settle().await;
    assert!(text(root, "[data-testid=keys-help]").contains("next / previous stall"));
}

#[wasm_bindgen_test]
async fn the_watch_source_sends_a_watch_and_shows_what_is_wrong_beside_it() {
    use ackscope_shared::WatchSpec;

    let store = Store::new(AppState::default());
    store.update(|s| apply(s, hello()));
    let (root, _mounted, sent) = mount_recording(store);
    let root: &Element = &root;
    let field = one(root, "input[data-testid=watch-port]").unchecked_into::<HtmlInputElement>();
    let start = || one(root, "button[data-testid=watch-start]").unchecked_into::<HtmlElement>();

    // Not a port: said beside the field, nothing sent.
    type_into(&field, "80a");
    start().click();
    settle().await;
    assert!(text(root, "[data-testid=watch-error]").contains("\"80a\" is not a port"));
    assert_eq!(field.get_attribute("aria-invalid").as_deref(), Some("true"));
    assert!(sent.borrow().is_empty(), "nothing was sent");

    type_into(&field, "8443,8080");
    start().click();
    settle().await;
    let watch = WatchSpec { ports: vec![8080, 8443], ..WatchSpec::default() };
    assert_eq!(sent.borrow().last(), Some(&ToProbe::StartRun { spec: Scenario::Watch(watch) }));
    assert!(root.query_selector("[data-testid=watch-error]").ok().flatten().is_none());

    // The probe's refusal of the watch is shown in the watch card, not under the run form.
    store.update(|s| apply(s, ToBrowser::Rejected { reason: "watch: no port".into() }));
    settle().await;
    assert_eq!(all(root, "[data-testid=rejected]").len(), 1);
    assert_eq!(
        text(root, ".watch-source [data-testid=rejected]"),
        "The probe refused: watch: no port"
    );

    // A process: its ports are the probe's to find.
    type_into(&field, "pid:4242");
    start().click();
    settle().await;
    let watch = WatchSpec { pid: Some(4242), ..WatchSpec::default() };
    assert_eq!(sent.borrow().last(), Some(&ToProbe::StartRun { spec: Scenario::Watch(watch) }));
}

/// A running watch of this probe's, its Nagle stalls found from the packets: each stall's live
/// fix is a button when the probe may try it, which asks the probe and then waits for the run
/// to split; the probe's refusal is said beside it; without the rights the buttons give way to
/// what the probe lacks; a finished watch offers nothing.
#[wasm_bindgen_test]
async fn a_running_watchs_stall_fix_is_a_button_when_the_probe_may_try_it() {
    use ackscope_shared::tried::{Sides, TriedOption};
    use ackscope_shared::{EventKind, WatchSpec};

    let store = Store::new(AppState::default());
    let watch = Scenario::Watch(WatchSpec { ports: vec![8080], ..WatchSpec::default() });
    let segments: Vec<_> = ackscope_shared::synthetic::nagle_run_with_packets(5, 44 * MS)
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::Segment(_)))
        .collect();
    store.update(|s| {
        apply(s, hello());
        apply(s, ToBrowser::TryRights { refused: None });
        let instruments = Instruments::default();
        apply(s, ToBrowser::RunStarted { run: RunId(1), spec: watch.clone(), instruments });
        apply(s, ToBrowser::Events { run: RunId(1), events: segments.clone() });
    });
    let (root, _mounted, sent) = mount_recording(store);
    let root: &Element = &root;
    settle().await;
    // A Nagle stall each way: each direction's writer gets the fix.
    let buttons = all(root, "[data-testid=stall-class] button[data-testid=try-fix]");
    let words: Vec<String> = buttons.iter().filter_map(|b| b.text_content()).collect();
    assert_eq!(
        words,
        ["try TCP_NODELAY on the client's sockets", "try TCP_NODELAY on the server's sockets"],
        "{}",
        root.inner_html()
    );
    let server = "[data-direction='server->client'] button[data-testid=try-fix][data-side=server]";
    one(root, server).unchecked_into::<HtmlElement>().click();
    settle().await;
    let sides = Sides::Server;
    assert_eq!(
        sent.borrow().last(),
        Some(&ToProbe::TryOnWatch { run: RunId(1), option: TriedOption::NoDelay, sides })
    );
    assert!(all(root, server).is_empty(), "asked: no second press");
    assert!(text(root, "[data-testid=try-state][data-side=server]").contains("the run splits"));
    assert_eq!(all(root, "[data-testid=try-fix][data-side=client]").len(), 1, "the other side's");

    // The probe's refusal answers the try: said beside the buttons (not as a refused run),
    // and the button is back.
    store.update(|s| apply(s, ToBrowser::Rejected { reason: "the watch is ending".into() }));
    settle().await;
    assert_eq!(text(root, "[data-testid=try-refused]"), "The probe refused: the watch is ending");
    assert!(all(root, "[data-testid=rejected]").is_empty(), "not the run form's refusal");
    // Both sides asked: neither is offered again.
    one(root, server).unchecked_into::<HtmlElement>().click();
    settle().await;
    one(root, "button[data-testid=try-fix][data-side=client]")
        .unchecked_into::<HtmlElement>()
        .click();
    settle().await;
    assert!(all(root, "[data-testid=try-fix]").is_empty(), "{}", root.inner_html());
    assert_eq!(all(root, "[data-testid=try-state]").len(), 2);
    assert!(all(root, "[data-testid=try-refused]").is_empty(), "a new try, no old refusal");

    // The server's went into force: the watch goes on in run 2, with the record; the client's,
    // asked and not yet in force, is still asked there.
    store.update(|s| {
        apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
        let instruments = Instruments::default();
        apply(s, ToBrowser::RunStarted { run: RunId(2), spec: watch.clone(), instruments });
        let tried = ackscope_shared::tried::OptionTried {
            option: TriedOption::NoDelay,
            side: ackscope_shared::Side::Server,
            pid: 4711,
            command: "python3".into(),
            sockets: 1,
            already_on: 0,
        };
        apply(s, ToBrowser::OptionsTried { run: RunId(2), tried: vec![tried] });
        apply(s, ToBrowser::Events { run: RunId(2), events: segments.clone() });
    });
    settle().await;
    assert!(text(root, "section.summary h2").contains("Run #2"), "the run going on is shown");
    assert!(all(root, "[data-testid=try-fix]").is_empty(), "{}", root.inner_html());
    assert!(text(root, "[data-testid=try-state][data-side=server]").contains("is on on the server"));
    assert!(text(root, "[data-testid=try-state][data-side=client]").contains("the run splits"));

    // A probe without the right: no button, what it lacks instead.
    let lacks = "this probe lacks CAP_SYS_PTRACE: start ackscope as root";
    store.update(|s| apply(s, ToBrowser::TryRights { refused: Some(lacks.into()) }));
    settle().await;
    assert!(all(root, "[data-testid=try-fix]").is_empty());
    assert_eq!(text(root, "[data-testid=try-rights]"), lacks);

    // A finished watch: nothing to try, nothing to say about it.
    store.update(|s| {
        apply(s, ToBrowser::TryRights { refused: None });
        apply(s, ToBrowser::RunFinished { run: RunId(2), outcome: RunOutcome::Interrupted });
    });
    settle().await;
    assert_eq!(all(root, "[data-testid=stall-class]").len(), 2, "the stalls stay");
    assert!(all(root, "[data-testid=try-fix], [data-testid=try-rights]").is_empty());
}
