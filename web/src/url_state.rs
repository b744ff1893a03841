//! The view in the page's URL, so that a link opens the same view: which file (`url`), which
//! run (`run`), the timeline's layout (`view`), its time window (`from`, `to`, nanoseconds)
//! and the selected request (`req`). Pure: parsing and writing the query string.

use crate::timeline::view::{Mode, ViewState};

/// What a link says about the view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrlView {
    /// The session file to open (`?url=`).
    pub url: Option<String>,
    pub run: Option<u32>,
    pub mode: Mode,
    /// `(from_ns, to_ns)` of the time window.
    pub window: Option<(u64, u64)>,
    pub req: Option<u32>,
}

impl UrlView {
    /// Reads a query string (`?url=...&run=2`, with or without the `?`). Unknown or malformed
    /// parameters are ignored: a link that half works beats an error page.
    pub fn parse(query: &str) -> UrlView {
        let mut view = UrlView::default();
        let (mut from, mut to) = (None, None);
        for pair in query.trim_start_matches('?').split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode(value);
            match key {
                "url" if !value.is_empty() => view.url = Some(value),
                "run" => view.run = value.parse().ok(),
                "view" if value == Mode::RunClock.word() => view.mode = Mode::RunClock,
                "from" => from = value.parse::<u64>().ok(),
                "to" => to = value.parse::<u64>().ok(),
                "req" => view.req = value.parse().ok(),
                _ => {}
            }
        }
        if let (Some(from), Some(to)) = (from, to) {
            view.window = (to > from).then_some((from, to));
        }
        view
    }

    /// The query string for this view, `?` included (empty when there is nothing to say).
    pub fn query(&self) -> String {
        let mut parts = Vec::new();
        if let Some(url) = &self.url {
            parts.push(format!("url={}", encode(url)));
        }
        if let Some(run) = self.run {
            parts.push(format!("run={run}"));
        }
        if self.mode != Mode::Aligned {
            parts.push(format!("view={}", self.mode.word()));
        }
        if let Some((from, to)) = self.window {
            parts.push(format!("from={from}&to={to}"));
        }
        if let Some(req) = self.req {
            parts.push(format!("req={req}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }

    /// The timeline's view state this link asks for.
    pub fn view_state(&self) -> ViewState {
        ViewState {
            mode: self.mode,
            window: self.window.map(|(from, to)| (from, to - from)),
            selected: self.req,
            ..ViewState::default()
        }
    }

    /// The link for a view state (of run `run` of the file at `url`, or of the live session).
    pub fn of(url: Option<String>, run: Option<u32>, view: &ViewState) -> UrlView {
        UrlView {
            url,
            run,
            mode: view.mode,
            window: view.window.map(|(from, domain)| (from, from + domain)),
            req: view.selected,
        }
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986, 2.3).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Undoes percent-encoding (and `+` for a space, as forms write it); a bad escape stays as is.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (escaped, bytes[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, byte) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The parameters a view writes ([`UrlView::query`]); any other (a class's `room`, a lesson's
/// `lesson` and `step`, `embed`) belongs to the page, not to the view.
const VIEW_KEYS: [&str; 6] = ["url", "run", "view", "from", "to", "req"];

/// The address for the page at `search` (its query, `?` or not) showing the view of
/// `view_query` ([`UrlView::query`]): the page's own parameters kept, in their order, then the
/// view's, which replace any the address had. Writing the view into the address bar must not
/// take a class page out of its room, or a lesson off its step.
pub fn relink(search: &str, view_query: &str) -> String {
    let own =
        search.trim_start_matches('?').split('&').filter(|pair| !pair.is_empty()).filter(|pair| {
            !VIEW_KEYS.contains(&pair.split_once('=').map_or(*pair, |(key, _)| key))
        });
    let view = view_query.trim_start_matches('?').split('&').filter(|pair| !pair.is_empty());
    let parts: Vec<&str> = own.chain(view).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Whether a query string asks for the embedded view (`embed=1`).
pub fn is_embed(search: &str) -> bool {
    search.trim_start_matches('?').split('&').any(|pair| pair == "embed=1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_in_the_address_keeps_the_pages_own_parameters() {
        // A student's page in a class, on a lesson's step, showing a live run.
        let student = "?room=K7QX2M&lesson=forty-ms&step=2";
        assert_eq!(relink(student, "?run=2&req=3"), format!("{student}&run=2&req=3"));
        // The view's parameters are replaced, the page's kept.
        let linked = "?lesson=forty-ms&run=1&from=5&to=9&step=3&req=4&embed=1";
        assert_eq!(
            relink(linked, "?run=2&view=run-clock"),
            "?lesson=forty-ms&step=3&embed=1&run=2&view=run-clock"
        );
        assert_eq!(relink("?run=1&req=2", ""), "");
        assert_eq!(relink("", "?run=1"), "?run=1");
    }

    #[test]
    fn embedding_is_asked_for_by_name() {
        assert!(is_embed("?embed=1&lesson=forty-ms&step=2"));
        assert!(is_embed("?lesson=forty-ms&embed=1"));
        assert!(!is_embed("?lesson=forty-ms") && !is_embed("?embed=10"));
    }

    #[test]
    fn a_view_round_trips_through_its_query() {
        let view = UrlView {
            url: Some("http://host:8000/runs/story 1.ackscope?x=1".into()),
            run: Some(2),
            mode: Mode::RunClock,
            window: Some((43_000_000, 44_500_000)),
            req: Some(999_999),
        };
        let query = view.query();
        assert!(query.starts_with(
            "?url=http%3A%2F%2Fhost%3A8000%2Fruns%2Fstory%201.ackscope%3Fx%3D1&run=2"
        ));
        assert!(query.ends_with("&view=run-clock&from=43000000&to=44500000&req=999999"), "{query}");
        assert_eq!(UrlView::parse(&query), view);
        assert_eq!(UrlView::default().query(), "");
    }

    #[test]
    fn bad_parameters_are_ignored_and_the_rest_is_kept() {
        let view = UrlView::parse("?run=x&from=9&to=3&req=7&view=sideways&url=a%2&zzz");
        assert_eq!(view.run, None);
        assert_eq!(view.window, None, "an empty window is no window");
        assert_eq!(view.req, Some(7));
        assert_eq!(view.mode, Mode::Aligned);
        assert_eq!(view.url.as_deref(), Some("a%2"), "a cut escape stays as it was");
        assert_eq!(UrlView::parse("url=a+b").url.as_deref(), Some("a b"));
    }

    #[test]
    fn the_view_state_and_the_link_agree() {
        let state = ViewState {
            mode: Mode::Aligned,
            window: Some((5, 10)),
            selected: Some(3),
            ..ViewState::default()
        };
        let link = UrlView::of(None, Some(1), &state);
        assert_eq!(link.window, Some((5, 15)));
        assert_eq!(link.view_state(), state);
    }
}
