//! A page's part in a class (`ackscope class`): the presenter, who holds the room's secret in
//! the URL's fragment, or a student, with only the room code. Pure; the lesson panel follows.

/// Who this page is in the room its link names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassRole {
    /// `?room=CODE#presenter=SECRET`: moves the room and starts the runs.
    Presenter { code: String, secret: String },
    /// `?room=CODE`: follows the presenter, or explores on its own.
    Student { code: String },
}

impl ClassRole {
    /// From the page's `location.search` and `location.hash`: no room code, no class.
    pub fn of(search: &str, hash: &str) -> Option<ClassRole> {
        let code = param(search.trim_start_matches('?'), "room")?;
        let code: String = code.chars().filter(char::is_ascii_alphanumeric).take(16).collect();
        if code.is_empty() {
            return None;
        }
        Some(match param(hash.trim_start_matches('#'), "presenter") {
            Some(secret) => ClassRole::Presenter { code, secret },
            None => ClassRole::Student { code },
        })
    }

    pub fn code(&self) -> &str {
        match self {
            ClassRole::Presenter { code, .. } | ClassRole::Student { code } => code,
        }
    }

    pub fn is_presenter(&self) -> bool {
        matches!(self, ClassRole::Presenter { .. })
    }

    /// The probe's WebSocket address for this page, with the room code the room asks for.
    pub fn socket_url(&self, base: &str) -> String {
        format!("{base}?room={}", self.code())
    }
}

fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key && !v.is_empty()).then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_says_who_the_page_is() {
        let presenter = ClassRole::of("?room=K7QX2M", "#presenter=00ff").unwrap();
        assert_eq!(
            presenter,
            ClassRole::Presenter { code: "K7QX2M".into(), secret: "00ff".into() }
        );
        let student = ClassRole::of("?lesson=forty-ms&room=K7QX2M", "").unwrap();
        assert_eq!(student, ClassRole::Student { code: "K7QX2M".into() });
        assert!(!student.is_presenter());
        assert_eq!(student.socket_url("ws://h:1/ws"), "ws://h:1/ws?room=K7QX2M");
        assert_eq!(ClassRole::of("?lesson=forty-ms", "#presenter=00ff"), None, "no room, no class");
        let odd = ClassRole::of("?room=AB%26x=1", "").unwrap();
        assert_eq!(odd.code(), "AB26x1", "only letters and digits reach the socket's URL");
    }
}
