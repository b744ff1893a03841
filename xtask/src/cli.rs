//! The flags of xtask's commands, read with lexopt: `--name VALUE` (or `--name=VALUE`) and
//! switches such as `--keep`. Every error names the flag or argument at fault and ends with the
//! command's usage, so a mistyped command says what it accepts.

use std::str::FromStr;

use lexopt::{Arg, Parser};

/// A command's flags, read one at a time: `while let Some(flag) = flags.next()? { match ... }`.
pub(crate) struct Flags {
    parser: Parser,
    usage: &'static str,
}

impl Flags {
    /// The flags in `args` (what follows the command's name); errors end with `usage`.
    pub(crate) fn new(args: &[String], usage: &'static str) -> Flags {
        Flags { parser: Parser::from_args(args), usage }
    }

    /// The next flag as written (`--rounds`, `-h`), `None` after the last. An argument that is
    /// not a flag is an error, as is a value given to a switch (`--keep=yes`).
    pub(crate) fn next(&mut self) -> Result<Option<String>, String> {
        let usage = self.usage;
        match self.parser.next() {
            Ok(None) => Ok(None),
            Ok(Some(Arg::Long(name))) => Ok(Some(format!("--{name}"))),
            Ok(Some(Arg::Short(letter))) => Ok(Some(format!("-{letter}"))),
            Ok(Some(Arg::Value(value))) => {
                Err(with_usage(format!("unexpected argument `{}`", value.to_string_lossy()), usage))
            }
            Err(lexopt::Error::UnexpectedValue { option, value }) => Err(with_usage(
                format!("{option} takes no value, not `{}`", value.to_string_lossy()),
                usage,
            )),
            Err(other) => Err(with_usage(other.to_string(), usage)),
        }
    }

    /// The value of `flag`, the flag [`Flags::next`] just gave: the next argument (even one
    /// that starts with `-`), or what follows its `=`.
    pub(crate) fn value(&mut self, flag: &str) -> Result<String, String> {
        match self.parser.value() {
            Ok(value) => Ok(value.to_string_lossy().into_owned()),
            Err(_) => Err(self.error(&format!("{flag} needs a value"))),
        }
    }

    /// The whole number `flag` takes (as [`Flags::value`]).
    pub(crate) fn number<T: FromStr>(&mut self, flag: &str) -> Result<T, String> {
        let value =
            self.parser.value().map_err(|_| self.error(&format!("{flag} needs a number")))?;
        let value = value.to_string_lossy();
        value
            .parse()
            .map_err(|_| self.error(&format!("{flag} needs a whole number, not `{value}`")))
    }

    /// The error for `flag`, which is not one of the command's.
    pub(crate) fn unknown(&self, flag: &str) -> String {
        self.error(&format!("unknown option `{flag}`"))
    }

    /// `message`, then the command's usage.
    pub(crate) fn error(&self, message: &str) -> String {
        with_usage(message, self.usage)
    }
}

fn with_usage(message: impl std::fmt::Display, usage: &str) -> String {
    format!("{message}\n{usage}")
}

/// Reads `args` made of `--name NUMBER` flags only, each name one of `numbers`, into the number
/// beside its name: a flag not given leaves its default, and of one given twice the last counts.
pub(crate) fn numbers(
    args: &[String],
    usage: &'static str,
    numbers: &mut [(&str, &mut u32)],
) -> Result<(), String> {
    let mut flags = Flags::new(args, usage);
    while let Some(flag) = flags.next()? {
        let (_, number) = numbers
            .iter_mut()
            .find(|(name, _)| *name == flag)
            .ok_or_else(|| flags.unknown(&flag))?;
        **number = flags.number(&flag)?;
    }
    Ok(())
}

/// `text` split at spaces, as a shell would pass it (for the tests of each command's flags).
#[cfg(test)]
pub(crate) fn args(text: &str) -> Vec<String> {
    text.split_whitespace().map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const USAGE: &str = "usage: cargo xtask bench demo [--rounds N] [--pin CPU]";

    fn demo(text: &str) -> Result<(u32, u32), String> {
        let (mut rounds, mut pin) = (5, 0);
        numbers(&args(text), USAGE, &mut [("--rounds", &mut rounds), ("--pin", &mut pin)])?;
        Ok((rounds, pin))
    }

    #[test]
    fn numbers_keep_their_defaults_and_take_the_last_value_given() {
        assert_eq!(demo(""), Ok((5, 0)));
        assert_eq!(demo("--pin 1"), Ok((5, 1)));
        assert_eq!(demo("--rounds 2 --pin 1 --rounds 7"), Ok((7, 1)));
        assert_eq!(demo("--rounds=9"), Ok((9, 0)), "the value may follow an `=`");
    }

    #[test]
    fn errors_name_the_flag_or_argument_and_end_with_the_usage() {
        let error = |text: &str| demo(text).unwrap_err();
        assert_eq!(error("--bogus 3"), format!("unknown option `--bogus`\n{USAGE}"));
        assert_eq!(error("-r 3"), format!("unknown option `-r`\n{USAGE}"));
        assert_eq!(error("--rounds"), format!("--rounds needs a number\n{USAGE}"));
        assert_eq!(error("--pin x"), format!("--pin needs a whole number, not `x`\n{USAGE}"));
        assert_eq!(error("--pin -1"), format!("--pin needs a whole number, not `-1`\n{USAGE}"));
        assert_eq!(error("--rounds 3 4"), format!("unexpected argument `4`\n{USAGE}"));
        assert_eq!(error("-- --rounds"), format!("unexpected argument `--rounds`\n{USAGE}"));
    }

    #[test]
    fn switches_and_values() {
        let read = |text: &str| -> Result<(bool, Option<String>), String> {
            let mut flags = Flags::new(&args(text), USAGE);
            let (mut keep, mut name) = (false, None);
            while let Some(flag) = flags.next()? {
                match flag.as_str() {
                    "--keep" => keep = true,
                    "--name" => name = Some(flags.value(&flag)?),
                    _ => return Err(flags.unknown(&flag)),
                }
            }
            Ok((keep, name))
        };
        assert_eq!(read("--keep --name a"), Ok((true, Some("a".into()))));
        assert_eq!(read("--name=-a"), Ok((false, Some("-a".into()))));
        assert_eq!(read("--name"), Err(format!("--name needs a value\n{USAGE}")));
        assert_eq!(read("--keep=yes"), Err(format!("--keep takes no value, not `yes`\n{USAGE}")));
    }
}
