//! The English text of each notification, rendered when it is written (a later rename of
//! the actor does not rewrite it: a notification says what was true when it happened).

/// "Mei liked your review", "Mei and 1 other liked your review", "Mei and 12 others …".
pub(super) fn like(actor: &str, others: i64) -> String {
    match others {
        0 => format!("{actor} liked your review"),
        1 => format!("{actor} and 1 other liked your review"),
        n => format!("{actor} and {n} others liked your review"),
    }
}

pub(super) fn new_follower(actor: &str) -> String {
    format!("{actor} started following you")
}

pub(super) fn streak_at_risk(days: i64) -> String {
    format!("Your {days}-day streak ends at midnight: sign in today to keep it")
}

pub(super) fn order_expiring(voucher: &str) -> String {
    format!("Your order for {voucher} expires in 5 minutes: pay now to keep it")
}

pub(super) fn order_expired(voucher: &str) -> String {
    format!("Your order for {voucher} expired unpaid")
}

/// "You won 3rd place on Weekly quiz".
pub(super) fn reward_paid(rank: i64, board: &str) -> String {
    format!("You won {} place on {board}", ordinal(rank))
}

pub(super) fn milestone(days: i64, points: i64) -> String {
    format!("You reached a {days}-day streak and earned {points} bonus points")
}

/// 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 22nd, 101st, 111th.
pub(super) fn ordinal(n: i64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The name shown for an actor no longer known.
pub(super) const SOMEONE: &str = "Someone";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_read_as_sentences() {
        assert_eq!(like("Mei", 12), "Mei and 12 others liked your review");
        assert_eq!(like("Mei", 1), "Mei and 1 other liked your review");
        assert_eq!(like("Mei", 0), "Mei liked your review");
        assert_eq!(
            reward_paid(3, "Weekly quiz"),
            "You won 3rd place on Weekly quiz"
        );
        let ordinals: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            ordinals,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }
}
