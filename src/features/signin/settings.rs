//! The settings of sign-in and streaks (`ENGAGE_MAKEUP_*`, `ENGAGE_REPAIR*`,
//! `ENGAGE_FREEZES_MAX`, `ENGAGE_STREAK_MILESTONES`), under their own heading in
//! `engage --help`.

use clap::Args;

/// What sign-in may be told at start, read once from the command line and the environment.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Sign-in")]
pub struct SignInSettings {
    /// Make-up sign-ins (`makeUpSignIn`, deprecated) a user may use per month; they count
    /// in the same monthly allowance as repairs.
    #[arg(long, env = "ENGAGE_MAKEUP_PER_MONTH", default_value_t = 2)]
    pub make_ups_per_month: u32,

    /// Days back (yesterday is 1) that `repairDay` reaches, across month and year ends.
    #[arg(long, env = "ENGAGE_REPAIR_WINDOW_DAYS", default_value_t = 7,
          value_parser = clap::value_parser!(u32).range(1..=28))]
    pub repair_window_days: u32,

    /// Repairs a user may make per month (the month of the day the repair is made).
    #[arg(long, env = "ENGAGE_REPAIRS_PER_MONTH", default_value_t = 2)]
    pub repairs_per_month: u32,

    /// Streak freezes a user may hold at once (each full 7 days of streak earn one).
    #[arg(long, env = "ENGAGE_FREEZES_MAX", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(0..=7))]
    pub freezes_max: u32,

    /// Points a streak freeze costs (`buyStreakFreeze`), spent from the user's balance.
    #[arg(long, env = "ENGAGE_FREEZE_COST", default_value_t = 50,
          value_parser = clap::value_parser!(i64).range(1..))]
    pub freeze_cost: i64,

    /// Streak lengths that pay a bonus once per streak, ascending; after the last, every
    /// multiple of the last one does too (365, 730, …).
    #[arg(long, env = "ENGAGE_STREAK_MILESTONES", default_value = "7,14,30,50,100,180,365",
          value_parser = parse_milestones)]
    pub streak_milestones: Milestones,
}

/// Ascending streak lengths, the last repeating by multiples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Milestones(pub Vec<u32>);

fn parse_milestones(text: &str) -> Result<Milestones, String> {
    let mut days = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let day: u32 = part
            .parse()
            .map_err(|_| format!("{part:?} is not a number of days"))?;
        if day == 0 || days.last().is_some_and(|last| *last >= day) {
            return Err("milestones must be positive and ascending".into());
        }
        days.push(day);
    }
    if days.is_empty() {
        return Err("at least one milestone".into());
    }
    Ok(Milestones(days))
}

impl Milestones {
    /// The first milestone after `streak`.
    pub(crate) fn next_after(&self, streak: i64) -> i64 {
        let streak = streak.max(0);
        if let Some(day) = self.0.iter().find(|d| i64::from(**d) > streak) {
            return i64::from(*day);
        }
        let every = i64::from(*self.0.last().unwrap_or(&365));
        (streak / every + 1) * every
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milestones_go_on_by_the_last_one() {
        let m = parse_milestones("7,14,30,50,100,180,365").unwrap();
        assert_eq!(m.next_after(0), 7);
        assert_eq!(m.next_after(7), 14);
        assert_eq!(m.next_after(29), 30);
        assert_eq!(m.next_after(365), 730);
        assert_eq!(m.next_after(800), 1095);
        assert!(parse_milestones("7,7").is_err());
        assert!(parse_milestones("").is_err());
    }
}
