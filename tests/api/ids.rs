//! Global IDs: unique across generators, ordered by time, decodable.

use std::collections::HashSet;

use engage::infra::ids::{self, IdGenerator};

use crate::harness::TestApp;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_hundred_thousand_ids_from_four_generators_are_unique_and_time_ordered() {
    let app = TestApp::spawn().await;
    let mut workers = Vec::new();
    for _ in 0..4 {
        // Four generators, as four instances would have, sharing one Redis.
        let generator = IdGenerator::new(
            app.infra().redis.clone(),
            app.infra().keys.clone(),
            app.infra().clock.clone(),
            64,
        );
        workers.push(tokio::spawn(async move {
            let mut made = Vec::with_capacity(25_000);
            for _ in 0..25_000 {
                let before = chrono::Utc::now().timestamp();
                let id = generator.next_id().await.unwrap();
                let after = chrono::Utc::now().timestamp();
                made.push((before, id, after));
            }
            made
        }));
    }
    let mut all = HashSet::new();
    for worker in workers {
        let made = worker.await.unwrap();
        for pair in made.windows(2) {
            assert!(pair[1].1 > pair[0].1, "one generator's ids increase");
        }
        for (before, id, after) in made {
            let second = ids::timestamp_of(id).timestamp();
            assert!(
                (before..=after).contains(&second),
                "id {id} carries the second it was made in"
            );
            assert!(all.insert(id), "id {id} was handed out twice");
        }
    }
    assert_eq!(all.len(), 100_000);
}

#[tokio::test]
async fn an_id_decodes_to_its_time_and_sequence() {
    let app = TestApp::spawn().await;
    let now = chrono::Utc::now().timestamp();
    let id = app.next_id().await;
    let parts = ids::decompose(id);
    assert!(parts.sequence >= 1);
    assert!((ids::timestamp_of(id).timestamp() - now).abs() <= 1);
    assert_eq!(ids::compose(parts), id);
}
