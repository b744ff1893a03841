//! What `ackscope watch --try` changed on a watched program's running sockets.
//!
//! A watch that tries an option splits its session at the moment the option goes into force:
//! the run before is the program as it was, the run after is the program with the option. The
//! run after carries the record of what was changed ([`crate::wire::ToBrowser::OptionsTried`],
//! protocol version 6), so a file says exactly what was tried on which process, and a reader
//! comparing the two runs names the change ([`changes`]) as it names a spec's.

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::event::Side;

/// A socket option a watch may try on another program's sockets: only options that stay set
/// (the probe says why TCP_QUICKACK and TCP_CORK are not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TriedOption {
    NoDelay,
}

impl TriedOption {
    /// "TCP_NODELAY".
    pub fn name(self) -> &'static str {
        match self {
            TriedOption::NoDelay => "TCP_NODELAY",
        }
    }
}

/// Which side's sockets of the watched connections an option is tried on (`--try
/// nodelay=server`, or a page's "try" button).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Sides {
    Client,
    Server,
    Both,
}

impl Sides {
    /// The side alone.
    pub fn of(side: Side) -> Sides {
        match side {
            Side::Client => Sides::Client,
            Side::Server => Sides::Server,
        }
    }

    pub fn includes(self, side: Side) -> bool {
        matches!(
            (self, side),
            (Sides::Both, _) | (Sides::Client, Side::Client) | (Sides::Server, Side::Server)
        )
    }

    /// Each side included, the client's first.
    pub fn each(self) -> impl Iterator<Item = Side> {
        [Side::Client, Side::Server].into_iter().filter(move |side| self.includes(*side))
    }

    /// "the server", "the client", "both sides".
    pub fn words(self) -> &'static str {
        match self {
            Sides::Client => "the client",
            Sides::Server => "the server",
            Sides::Both => "both sides",
        }
    }
}

/// One option turned on for the sockets of one process on one side of the watched
/// connections.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptionTried {
    pub option: TriedOption,
    /// The side of the watched connections whose sockets were changed.
    pub side: Side,
    pub pid: u32,
    /// The process's command (`/proc/PID/comm`), as the watch found it; a longer one (a
    /// broken or hostile file) is cut to [`MAX_COMMAND_CHARS`] as it is decoded.
    #[serde(deserialize_with = "bounded_command")]
    pub command: String,
    /// Sockets of the process changed so far.
    pub sockets: u32,
    /// Of them, those that had the option on already.
    pub already_on: u32,
}

/// Processes and options a run's record keeps ([`OptionTried`]s): a watch changes a handful;
/// more comes only from a broken or hostile file, and is counted, not kept.
pub const MAX_TRIED: usize = 64;
/// The longest command kept: Linux's is at most 15 bytes.
pub const MAX_COMMAND_CHARS: usize = 64;

impl OptionTried {
    /// "TCP_NODELAY on the server: off -> on (applied to the running process 4711, python3)".
    pub fn describe(&self) -> String {
        let was = match self.already_on {
            0 => "off",
            on if on >= self.sockets => "on",
            _ => "off on some sockets",
        };
        self.line(&format!("{was} -> on"), "applied to the running process")
    }

    /// "TCP_NODELAY on the server: CHANGE (PROCESS 4711, python3)".
    fn line(&self, change: &str, process: &str) -> String {
        let (option, side) = (self.option.name(), self.side.name());
        format!("{option} on the {side}: {change} ({process} {}, {})", self.pid, self.command)
    }

    /// The same change to the same process: one entry each in a run's record.
    fn same_change(&self, other: &OptionTried) -> bool {
        (self.option, self.side, self.pid) == (other.option, other.side, other.pid)
    }
}

/// A command of at most [`MAX_COMMAND_CHARS`], however long the decoded one: only that much is
/// copied out of the message.
fn bounded_command<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct Command;
    impl Visitor<'_> for Command {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a command")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<String, E> {
            Ok(text.chars().take(MAX_COMMAND_CHARS).collect())
        }
    }
    deserializer.deserialize_str(Command)
}

/// The entries of an [`crate::wire::ToBrowser::OptionsTried`] message, at most [`MAX_TRIED`]:
/// the rest are read and left out, so a message of millions costs one entry's memory each.
pub fn bounded_list<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<OptionTried>, D::Error> {
    struct List;
    impl<'de> Visitor<'de> for List {
        type Value = Vec<OptionTried>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of options tried")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut kept = Vec::new();
            while let Some(entry) = seq.next_element::<OptionTried>()? {
                if kept.len() < MAX_TRIED {
                    kept.push(entry);
                }
            }
            Ok(kept)
        }
    }
    deserializer.deserialize_seq(List)
}

/// A run's record of options tried, bounded ([`MAX_TRIED`], [`MAX_COMMAND_CHARS`]): each
/// message of it replaces the entries it names and adds the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TriedRecord {
    tried: Vec<OptionTried>,
    /// Entries of a record past [`MAX_TRIED`], left out.
    pub left_out: u64,
}

impl TriedRecord {
    pub fn take(&mut self, message: &[OptionTried]) {
        for entry in message {
            let mut entry = entry.clone();
            if entry.command.chars().count() > MAX_COMMAND_CHARS {
                entry.command = entry.command.chars().take(MAX_COMMAND_CHARS).collect();
            }
            match self.tried.iter().position(|kept| kept.same_change(&entry)) {
                Some(at) => self.tried[at] = entry,
                None if self.tried.len() < MAX_TRIED => self.tried.push(entry),
                None => self.left_out += 1,
            }
        }
    }

    /// One more socket of process `pid` on `side` got `option`; `was_on`: it had it already.
    pub fn count(
        &mut self,
        option: TriedOption,
        side: Side,
        pid: u32,
        command: &str,
        was_on: bool,
    ) {
        let mut entry = OptionTried {
            option,
            side,
            pid,
            command: command.to_string(),
            sockets: 1,
            already_on: u32::from(was_on),
        };
        if let Some(kept) = self.tried.iter().find(|kept| kept.same_change(&entry)) {
            entry.sockets += kept.sockets;
            entry.already_on += kept.already_on;
        }
        self.take(&[entry]);
    }

    pub fn entries(&self) -> &[OptionTried] {
        &self.tried
    }

    pub fn is_empty(&self) -> bool {
        self.tried.is_empty()
    }

    /// Whether `option` was applied to some socket on `side`.
    pub fn has(&self, option: TriedOption, side: Side) -> bool {
        self.tried.iter().any(|entry| (entry.option, entry.side) == (option, side))
    }
}

/// What changed in the options tried from one run to another, for people comparing runs: an
/// entry for each option in force in `to` and not in `from`, and for each the other way round
/// ("TCP_NODELAY on the server: on -> as the program set it (process 4711, python3)").
pub fn changes(from: &[OptionTried], to: &[OptionTried]) -> Vec<String> {
    let missing_from = |list: &[OptionTried], entry: &OptionTried| {
        !list.iter().any(|other| other.same_change(entry))
    };
    let added = to.iter().filter(|entry| missing_from(from, entry)).map(OptionTried::describe);
    let removed = from
        .iter()
        .filter(|entry| missing_from(to, entry))
        .map(|entry| entry.line("on -> as the program set it", "process"));
    added.chain(removed).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(pid: u32, already_on: u32) -> OptionTried {
        OptionTried {
            option: TriedOption::NoDelay,
            side: Side::Server,
            pid,
            command: "python3".into(),
            sockets: 2,
            already_on,
        }
    }

    #[test]
    fn a_change_reads_as_the_option_the_side_and_the_process() {
        assert_eq!(
            server(4711, 0).describe(),
            "TCP_NODELAY on the server: off -> on (applied to the running process 4711, python3)"
        );
        assert!(server(4711, 1).describe().contains("off on some sockets -> on"));
        assert!(server(4711, 2).describe().contains(": on -> on"));
    }

    #[test]
    fn comparing_before_with_after_names_what_was_applied_and_nothing_else() {
        let after = [server(4711, 0)];
        assert_eq!(
            changes(&[], &after),
            ["TCP_NODELAY on the server: off -> on (applied to the running process 4711, python3)"]
        );
        assert!(changes(&after, &after).is_empty());
        let back = changes(&after, &[]);
        assert_eq!(back.len(), 1);
        assert!(back[0].starts_with("TCP_NODELAY on the server: on -> as the program set it"));
    }

    /// A broken or hostile file's huge message costs a bounded record as it is decoded: the
    /// entries past [`MAX_TRIED`] are read and dropped, a long command cut.
    #[test]
    fn a_huge_options_tried_message_decodes_into_a_bounded_list() {
        use crate::event::RunId;
        use crate::wire::{decode, encode, ToBrowser};
        let mut long = server(7, 0);
        long.command = "y".repeat(100_000);
        let mut tried: Vec<OptionTried> = (0..10_000).map(|pid| server(pid, 0)).collect();
        tried.insert(0, long);
        let bytes = encode(&ToBrowser::OptionsTried { run: RunId(1), tried });
        let ToBrowser::OptionsTried { tried, .. } = decode(&bytes).unwrap() else {
            panic!("the same message")
        };
        assert_eq!(tried.len(), MAX_TRIED);
        assert_eq!(tried[0].command.len(), MAX_COMMAND_CHARS);
        assert_eq!(tried[1], server(0, 0));
    }

    #[test]
    fn a_record_keeps_one_entry_per_change_and_is_bounded() {
        let mut record = TriedRecord::default();
        record.take(&[server(1, 0)]);
        let mut more = server(1, 0);
        more.sockets = 5;
        record.take(&[more]);
        assert_eq!(record.entries().len(), 1, "the same process and option: replaced");
        assert_eq!(record.entries()[0].sockets, 5);
        let many: Vec<OptionTried> = (2..1000).map(|pid| server(pid, 0)).collect();
        record.take(&many);
        assert_eq!(record.entries().len(), MAX_TRIED);
        assert_eq!(record.left_out, 998 - (MAX_TRIED as u64 - 1));

        let mut long = server(5000, 0);
        long.command = "x".repeat(10_000);
        let mut record = TriedRecord::default();
        record.take(&[long]);
        assert_eq!(record.entries()[0].command.len(), MAX_COMMAND_CHARS);
    }
}
