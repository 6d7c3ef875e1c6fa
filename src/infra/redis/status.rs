//! The status codes the Lua scripts answer first, named once for both sides: the scripts
//! take them from `lua/include/status.lua`, Rust from [`Status`]. Every script speaks this
//! one vocabulary (no `-1` that means three things), and [`Status::refusal`] is the one
//! match from a refusal to the error a client sees, but for a caller whose clients branch
//! on one refusal: that caller names its own code (`OVER_LIMIT` of a make-up sign-in is
//! `MAKEUP_LIMIT`, `features::signin`), and the generic code stays here.

use crate::infra::error::{AppError, AppResult, ErrorCode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Done, as asked.
    Ok,
    /// Done before: nothing changed (signed in today, order settled, document stored).
    Already,
    /// Redis lacks what SQL holds: restore it from SQL, then call again.
    Missing,
    /// Older than Redis remembers: ask SQL, then call again with its answer.
    AskArchive,
    /// Too early: the sale has not started, the order is not due to expire.
    NotYet,
    /// Too late: the sale has ended.
    Ended,
    /// One per person (or per id), and there is one already.
    Taken,
    /// No stock left.
    SoldOut,
    /// No such thing for this caller (another buyer's order).
    NotFound,
    /// An allowance is used up, or a budget would be exceeded.
    OverLimit,
    /// A rebuild holds writes back: call again shortly.
    Held,
    /// What the caller read before the call changed meanwhile: read it again, then call
    /// again.
    Moved,
}

impl Status {
    /// The status of a script's code; a code outside the vocabulary is a bug of `script`.
    pub(crate) fn of(script: &str, code: i64) -> AppResult<Self> {
        Ok(match code {
            0 => Self::Ok,
            1 => Self::Already,
            -1 => Self::Missing,
            -2 => Self::AskArchive,
            -3 => Self::NotYet,
            -4 => Self::Ended,
            -5 => Self::Taken,
            -6 => Self::SoldOut,
            -7 => Self::NotFound,
            -8 => Self::OverLimit,
            -9 => Self::Held,
            -10 => Self::Moved,
            other => {
                return Err(AppError::internal(anyhow::anyhow!(
                    "lua/{script}.lua answered {other}, which is no status"
                )))
            }
        })
    }

    /// The code the scripts write for this status.
    #[cfg(test)]
    pub(crate) fn code(self) -> i64 {
        match self {
            Self::Ok => 0,
            Self::Already => 1,
            Self::Missing => -1,
            Self::AskArchive => -2,
            Self::NotYet => -3,
            Self::Ended => -4,
            Self::Taken => -5,
            Self::SoldOut => -6,
            Self::NotFound => -7,
            Self::OverLimit => -8,
            Self::Held => -9,
            Self::Moved => -10,
        }
    }

    /// The error a client sees when a script refused with this status, in the caller's
    /// words. The statuses that are not refusals (done, or a step the caller takes before
    /// calling again) reaching here are a bug of the caller.
    pub(crate) fn refusal(self, message: impl Into<String>) -> AppError {
        let code = match self {
            Self::NotYet => ErrorCode::NotStarted,
            Self::Ended => ErrorCode::Ended,
            Self::Taken => ErrorCode::AlreadyOrdered,
            Self::SoldOut => ErrorCode::SoldOut,
            Self::NotFound => ErrorCode::NotFound,
            Self::OverLimit => ErrorCode::BadUserInput,
            Self::Ok
            | Self::Already
            | Self::Missing
            | Self::AskArchive
            | Self::Held
            | Self::Moved => {
                return AppError::internal(anyhow::anyhow!(
                    "{self:?} is not a refusal: {}",
                    message.into()
                ))
            }
        };
        AppError::client(code, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_reads_back_from_its_code() {
        for code in -10..=1 {
            assert_eq!(Status::of("test", code).unwrap().code(), code);
        }
        assert!(Status::of("test", 2).is_err());
        assert!(Status::of("test", -11).is_err());
    }

    #[test]
    fn the_lua_vocabulary_names_the_same_codes() {
        let lua = include_str!("../../../lua/include/status.lua");
        for (name, status) in [
            ("OK", Status::Ok),
            ("ALREADY", Status::Already),
            ("MISSING", Status::Missing),
            ("ASK_ARCHIVE", Status::AskArchive),
            ("NOT_YET", Status::NotYet),
            ("ENDED", Status::Ended),
            ("TAKEN", Status::Taken),
            ("SOLD_OUT", Status::SoldOut),
            ("NOT_FOUND", Status::NotFound),
            ("OVER_LIMIT", Status::OverLimit),
            ("HELD", Status::Held),
            ("MOVED", Status::Moved),
        ] {
            let line = format!("local {name} = {}", status.code());
            assert!(
                lua.lines().any(|l| l.starts_with(&line)),
                "status.lua lacks `{line}`"
            );
        }
    }
}
