//! The topics this instance takes jobs from, and which of them are held back for now.
//!
//! A topic joins when a promotion left jobs waiting in it and leaves when a take found none
//! waiting: jobs promoted once are taken until they are gone, without promoting the topic
//! again on every tick. A take that answered nothing because its topic is paused or at a
//! limit holds the topic: it is not asked again until the next tick, or until one of its
//! deliveries here ends and frees a slot. Over a thousand topics, promotions of topics that
//! only had jobs waiting and takes from topics at their limit were most of the calls.

use std::collections::HashSet;

/// What a take found its topic left with (the first value of `jobs_take.lua`'s reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Left {
    /// No job waits.
    Empty,
    /// Jobs may wait.
    More,
    /// Jobs wait, but the topic is paused or at a limit.
    Held,
}

impl Left {
    pub(super) fn of(reply: &str) -> Self {
        match reply {
            "0" => Self::Empty,
            "2" => Self::Held,
            _ => Self::More,
        }
    }
}

#[derive(Default)]
pub(super) struct ReadyTopics {
    /// In the order they joined, so every topic is asked in turn.
    order: Vec<String>,
    joined: HashSet<String>,
    held: HashSet<String>,
}

impl ReadyTopics {
    /// A new tick: held topics may be asked again (another instance may have freed a slot,
    /// a second may have passed, a pause ended).
    pub(super) fn tick(&mut self) {
        self.held.clear();
    }

    /// Promotions: `topics` have jobs waiting.
    pub(super) fn promoted(&mut self, topics: impl IntoIterator<Item = String>) {
        for topic in topics {
            if self.joined.insert(topic.clone()) {
                self.order.push(topic);
            }
        }
    }

    /// The topics to ask now.
    pub(super) fn takeable(&self) -> Vec<String> {
        self.order
            .iter()
            .filter(|topic| !self.held.contains(*topic))
            .cloned()
            .collect()
    }

    /// What a take of `topic` found left.
    pub(super) fn took(&mut self, topic: &str, left: Left) {
        match left {
            Left::More => {}
            Left::Held => {
                self.held.insert(topic.to_string());
            }
            Left::Empty => {
                if self.joined.remove(topic) {
                    self.order.retain(|joined| joined != topic);
                    self.held.remove(topic);
                }
            }
        }
    }

    /// A delivery of `topic` ended here (its end applied): the topic has a slot free.
    /// Whether it was held.
    pub(super) fn ended(&mut self, topic: &str) -> bool {
        self.held.remove(topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn promoted(topics: &[&str]) -> ReadyTopics {
        let mut ready = ReadyTopics::default();
        ready.promoted(topics.iter().map(|topic| topic.to_string()));
        ready
    }

    #[test]
    fn a_topic_stays_until_a_take_finds_it_empty_and_joins_once() {
        let mut ready = promoted(&["a", "b"]);
        ready.promoted(["b".to_string(), "c".to_string()]);
        assert_eq!(ready.takeable(), ["a", "b", "c"]);
        ready.took("a", Left::More);
        ready.took("b", Left::Empty);
        assert_eq!(ready.takeable(), ["a", "c"]);
        ready.promoted(["b".to_string()]);
        assert_eq!(ready.takeable(), ["a", "c", "b"]);
    }

    #[test]
    fn a_held_topic_is_asked_again_after_an_end_or_the_next_tick() {
        let mut ready = promoted(&["a", "b"]);
        ready.took("a", Left::Held);
        ready.took("b", Left::Held);
        assert!(ready.takeable().is_empty());
        assert!(ready.ended("a"));
        assert!(!ready.ended("a"), "no longer held");
        assert_eq!(ready.takeable(), ["a"]);
        ready.tick();
        assert_eq!(ready.takeable(), ["a", "b"]);
    }
}
