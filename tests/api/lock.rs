//! The distributed lock: one winner, owner-only release, lease renewal, fencing.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use engage::infra::lock::with_lock;

use crate::harness::TestApp;

#[tokio::test]
async fn of_two_contenders_one_wins_and_the_loser_cannot_release_the_winners_lock() {
    let app = TestApp::spawn().await;
    let infra = app.infra().clone();
    let inside = Arc::new(AtomicUsize::new(0));
    let winner = {
        let (infra, inside) = (infra.clone(), inside.clone());
        tokio::spawn(async move {
            with_lock(
                &infra,
                "contested",
                Duration::from_secs(5),
                |held| async move {
                    inside.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    held.fence
                },
            )
            .await
            .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let loser = with_lock(&infra, "contested", Duration::from_secs(5), |_| async {
        unreachable!()
    })
    .await
    .unwrap();
    assert!(loser.is_none(), "the second contender does not get in");

    // The loser's attempt left the winner's lock alone.
    let mut conn = app.redis_connection().await;
    let owner: Option<String> = redis::cmd("GET")
        .arg(app.keys().lock_owner("contested"))
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert!(owner.is_some_and(|o| o.starts_with(&app.instance_id())));
    drop(conn);
    let first_fence = winner.await.unwrap().expect("the first contender won");
    assert_eq!(inside.load(Ordering::SeqCst), 1);

    let next_fence = with_lock(
        &infra,
        "contested",
        Duration::from_secs(5),
        |held| async move { held.fence },
    )
    .await
    .unwrap();
    assert!(
        next_fence.unwrap() > first_fence,
        "fencing numbers only grow"
    );
}

#[tokio::test]
async fn a_long_holder_keeps_its_lock_through_renewals() {
    let app = TestApp::spawn().await;
    let infra = app.infra().clone();
    let holder = {
        let infra = infra.clone();
        tokio::spawn(async move {
            with_lock(
                &infra,
                "long-job",
                Duration::from_millis(300),
                |held| async move {
                    tokio::time::sleep(Duration::from_millis(1200)).await;
                    held.lost.is_cancelled()
                },
            )
            .await
            .unwrap()
        })
    };
    // Well past the 300 ms lease, the lock is still held.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let other = with_lock(&infra, "long-job", Duration::from_millis(300), |_| async {})
            .await
            .unwrap();
        assert!(other.is_none(), "the lease was renewed");
    }
    assert_eq!(
        holder.await.unwrap(),
        Some(false),
        "the holder never lost it"
    );
    let after = with_lock(&infra, "long-job", Duration::from_millis(300), |_| async {})
        .await
        .unwrap();
    assert!(after.is_some(), "released when the work ended");
}
