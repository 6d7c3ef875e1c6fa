//! How much a secret is worth: the check production makes of `ENGAGE_JWT_SECRET` before it
//! signs and trusts tokens with it.
//!
//! A secret someone typed is guessed long before its length says: `aaaa…`, `0123…abcdef`,
//! a short pattern repeated, a sentence of words, the development secret with a capital
//! letter. The estimate here is deliberately simple, so that docs/security.md can say exactly what
//! it refuses, and it errs towards refusing typed secrets (a random one is one command away:
//! `openssl rand -hex 32`). The alternative not taken, a full password-strength estimator
//! with dictionaries (zxcvbn), would be a large dependency to judge a value that should never
//! have been typed in the first place.
//!
//! The estimate: every character is worth log2 of the alphabet the secret draws on (26 for
//! lowercase letters, 26 for uppercase, 10 for digits, and one for each distinct other
//! character), except that
//! - a character that repeats the one before it (a run), or steps one place from it, either
//!   way, along `0-9a-z` (so hex order too) or a keyboard row, in the same case (a
//!   sequence), is worth nothing;
//! - a character that ends three characters seen before in the secret (a repeated pattern)
//!   is worth nothing;
//! - a letter in a run of four or more lowercase letters (a typed word), or of uppercase
//!   letters in a secret without lowercase, is worth [`WORD_LETTER_BITS`]; in a secret with
//!   letters of both cases, a run of six or more ([`WORD_LETTERS_MIXED_CASE`]).
//!
//! Production wants [`MIN_PRODUCTION_BITS`]. A random 32-byte secret is worth about 250 bits
//! in hex and 245 in base64 by this estimate, and none drawn came near the line (the least
//! of 50,000 in hex: 167; of 20,000 in base64: 169). Runs of four counted as words in base64
//! too let about one random secret in 100,000 fall under it. Words count only in one case,
//! and from six letters in a secret with both, because random base64 has runs of letters of
//! either case all the time; `Capitalised-Words` pass more easily than `lowercase-words`
//! for it.

use std::collections::HashSet;

/// What production wants a secret to be worth: HS256's security is at most its 256-bit
/// output, and half of that is the usual floor for a symmetric key.
pub(crate) const MIN_PRODUCTION_BITS: f64 = 128.0;

/// What a letter of a typed word is worth: English text carries less than two bits a letter,
/// and a passphrase of dictionary words about 2.6 (12.9 bits a word of five letters).
pub(crate) const WORD_LETTER_BITS: f64 = 1.5;

/// Letters of one case in a row from which they count as a word.
const WORD_LETTERS: usize = 4;

/// The same in a secret with letters of both cases: random base64 has runs of four or five
/// lowercase letters in most secrets, and a run of six in few.
const WORD_LETTERS_MIXED_CASE: usize = 6;

/// Orders along which a next character is a guess away: letters and digits (`89ab` is hex
/// order), and the rows of a keyboard.
const SEQUENCES: [&str; 4] = [
    "0123456789abcdefghijklmnopqrstuvwxyz",
    "qwertyuiop",
    "asdfghjkl",
    "zxcvbnm",
];

/// Why a secret is not good enough for production.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Weakness {
    /// The published development secret, in any case and spacing.
    Development,
    /// Worth fewer bits than production wants.
    Guessable { bits: f64 },
}

/// Whether `secret` is fit to sign production tokens; `development` is the published
/// development secret, refused whatever its case and spacing and wherever it appears.
pub(crate) fn weakness(secret: &str, development: &str) -> Option<Weakness> {
    let canonical = |text: &str| -> String {
        text.chars()
            .filter(|c| !c.is_whitespace())
            .flat_map(char::to_lowercase)
            .collect()
    };
    if canonical(secret).contains(&canonical(development)) {
        return Some(Weakness::Development);
    }
    let bits = estimated_bits(secret);
    (bits < MIN_PRODUCTION_BITS).then_some(Weakness::Guessable { bits })
}

/// What `secret` is worth in bits, by the rules of the module's doc.
pub(crate) fn estimated_bits(secret: &str) -> f64 {
    let chars: Vec<char> = secret.chars().collect();
    let per_char = alphabet(&chars).log2();
    let in_word = words(&chars);
    let mut seen = HashSet::new();
    let mut bits = 0.0;
    for (i, &c) in chars.iter().enumerate() {
        // Every pattern of three is noted, whether or not this character is worth anything.
        let repeated = i >= 2 && !seen.insert([chars[i - 2], chars[i - 1], c]);
        let follows = i >= 1 && (chars[i - 1] == c || is_step(chars[i - 1], c));
        if repeated || follows {
            continue;
        }
        bits += if in_word[i] {
            WORD_LETTER_BITS
        } else {
            per_char
        };
    }
    bits
}

/// The size of the alphabet a secret draws on: each class of ASCII letters and digits it
/// uses whole, and each other character it uses once.
fn alphabet(chars: &[char]) -> f64 {
    let class = |test: fn(&char) -> bool, size: usize| {
        if chars.iter().any(test) {
            size
        } else {
            0
        }
    };
    let others: HashSet<char> = chars
        .iter()
        .copied()
        .filter(|c| !c.is_ascii_alphanumeric())
        .collect();
    (class(char::is_ascii_lowercase, 26)
        + class(char::is_ascii_uppercase, 26)
        + class(char::is_ascii_digit, 10)
        + others.len()) as f64
}

/// The kinds of character the rules tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lower,
    Upper,
    Digit,
    Other,
}

fn kind(c: char) -> Kind {
    match c {
        'a'..='z' => Kind::Lower,
        'A'..='Z' => Kind::Upper,
        '0'..='9' => Kind::Digit,
        _ => Kind::Other,
    }
}

/// Which characters belong to a run of [`WORD_LETTERS`] or more lowercase letters, or of
/// uppercase ones in a secret without lowercase ([`WORD_LETTERS_MIXED_CASE`] in a secret
/// with both).
fn words(chars: &[char]) -> Vec<bool> {
    let has = |wanted: Kind| chars.iter().any(|&c| kind(c) == wanted);
    let (word_kind, least) = match (has(Kind::Lower), has(Kind::Upper)) {
        (true, true) => (Kind::Lower, WORD_LETTERS_MIXED_CASE),
        (true, false) => (Kind::Lower, WORD_LETTERS),
        (false, _) => (Kind::Upper, WORD_LETTERS),
    };
    let mut in_word = vec![false; chars.len()];
    let mut start = 0;
    while start < chars.len() {
        if kind(chars[start]) != word_kind {
            start += 1;
            continue;
        }
        let end = (start..chars.len())
            .find(|&i| kind(chars[i]) != word_kind)
            .unwrap_or(chars.len());
        if end - start >= least {
            in_word[start..end].fill(true);
        }
        start = end;
    }
    in_word
}

/// `b` is one place from `a`, either way, along one of the [`SEQUENCES`]: letters of one
/// case, digits, or a digit and a letter (`9a`, hex order). A change of case is not a step:
/// random base64 changes case all the time.
fn is_step(a: char, b: char) -> bool {
    let kinds = (kind(a), kind(b));
    let comparable = match kinds {
        (Kind::Other, _) | (_, Kind::Other) => false,
        (x, y) if x == y => true,
        (Kind::Digit, _) | (_, Kind::Digit) => true,
        _ => false,
    };
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    comparable
        && SEQUENCES
            .iter()
            .any(|order| match (order.find(a), order.find(b)) {
                (Some(x), Some(y)) => x.abs_diff(y) == 1,
                _ => false,
            })
}

#[cfg(test)]
mod tests {
    use base64::{engine::general_purpose::STANDARD, Engine};
    use rand::RngCore;

    use super::*;

    const DEV: &str = "engage-dev-secret-do-not-use-in-production";

    fn refused(secret: &str) -> bool {
        weakness(secret, DEV).is_some()
    }

    #[test]
    fn random_secrets_of_32_bytes_are_strong_in_hex_and_base64() {
        let mut bytes = [0u8; 32];
        let (mut total, mut least) = (0.0, f64::MAX);
        for _ in 0..2000 {
            rand::rng().fill_bytes(&mut bytes);
            for secret in [hex::encode(bytes), STANDARD.encode(bytes)] {
                let bits = estimated_bits(&secret);
                assert!(!refused(&secret), "{secret}: {bits}");
                (total, least) = (total + bits, least.min(bits));
            }
        }
        // Far past the line as a rule, not just over it.
        assert!(
            total / 4000.0 > 1.5 * MIN_PRODUCTION_BITS,
            "{}",
            total / 4000.0
        );
        assert!(least > MIN_PRODUCTION_BITS, "{least}");
        // As `openssl rand` prints them; the last, with four runs of lowercase letters, was
        // refused while runs of four counted as words in base64 too.
        for secret in [
            "41e6900d1caeb1d14a221e77c7b4c62aa428b1e85134b58f7b52567aa308cb89",
            "OUjtN04q/P07LEQMbWkY4hFYsT1DSctY/OqvXHUF1YI=",
            "jYQP5azTTsDuiffbua98OPqqmdggx2191qamjRuazak=",
        ] {
            assert!(!refused(secret), "{secret}");
        }
    }

    #[test]
    fn runs_sequences_repeats_words_and_the_development_secret_are_refused() {
        let weak = [
            "a".repeat(64),
            "0123456789abcdef0123456789abcdef".into(),
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".into(),
            "fedcba9876543210fedcba9876543210".into(),
            "qwertyuiopasdfghjklzxcvbnm1234567890".into(),
            "ab".repeat(20),
            "x7Q".repeat(16),
            "Tr0ub4dor&3".repeat(4),
            "my-super-secret-password-for-production-2026".into(),
            "correct horse battery staple and some more words".into(),
            "CORRECT-HORSE-BATTERY-STAPLE-AND-SOME-MORE-WORDS".into(),
            "correct-horse-battery-staple-orange-purple-monkey-dishwasher".into(),
        ];
        for secret in &weak {
            assert!(
                matches!(weakness(secret, DEV), Some(Weakness::Guessable { .. })),
                "{secret}: {}",
                estimated_bits(secret)
            );
        }
        for secret in [
            DEV.to_string(),
            DEV.to_uppercase(),
            "Engage-Dev-Secret-Do-Not-Use-In-Production".into(),
            format!(" {DEV} \n"),
            "engage-dev-secret - do-not-use-in-production".into(),
            format!("{DEV}-2"),
        ] {
            assert_eq!(
                weakness(&secret, DEV),
                Some(Weakness::Development),
                "{secret}"
            );
        }
    }

    #[test]
    fn each_rule_takes_away_what_it_says() {
        // Lowercase letters and digits: log2(36) bits a character.
        let per = 36f64.log2();
        assert!((estimated_bits("a1") - 2.0 * per).abs() < 1e-9);
        // A run, a step, a pattern of three seen before: nothing.
        assert!((estimated_bits("a1111") - 2.0 * per).abs() < 1e-9);
        assert!((estimated_bits("a1234") - 2.0 * per).abs() < 1e-9);
        // A pattern is worth its first time and the two characters that begin its second.
        assert!((estimated_bits(&"x7q".repeat(16)) - 5.0 * per).abs() < 1e-9);
        // A word: WORD_LETTER_BITS a letter (alphabet: lowercase and `-`); two letters
        // are no word.
        let bits = estimated_bits("ax-house");
        let per = 27f64.log2();
        assert!(
            (bits - (3.0 * per + 5.0 * WORD_LETTER_BITS)).abs() < 1e-9,
            "{bits}"
        );
        // No step across a change of case.
        let per = 52f64.log2();
        assert!((estimated_bits("aBcD") - 4.0 * per).abs() < 1e-9);
    }
}
