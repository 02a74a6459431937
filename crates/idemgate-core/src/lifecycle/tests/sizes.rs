//! What the futures of a request in flight weigh: sizes fixed at compile time, carried by
//! every request for as long as its upstream takes.

use super::*;

#[tokio::test]
async fn a_held_operation_is_stored_once_beside_a_small_renewal() {
    let (e, _) = engine();
    let (k, p) = (unique_key("alice"), plan(LeaseExpiredPolicy::Takeover));
    let h = run(&e, &k, &p).await;
    let ballast = [7u8; 4096];
    let operation = async move {
        tokio::task::yield_now().await;
        ballast.iter().map(|&b| usize::from(b)).sum::<usize>()
    };
    let operation_size = std::mem::size_of_val(&operation);
    assert!(operation_size >= 4096, "{operation_size}");
    let held = e.hold(&h, operation);
    let size = std::mem::size_of_val(&held);
    // An `async fn` kept the operation twice (its argument and its pinned copy): 8 KiB.
    assert!(
        size < operation_size + 1024,
        "hold's future is {size} bytes for an operation of {operation_size}"
    );
    assert_eq!(held.await, 7 * 4096);
    assert_eq!(e.finish(&h, Outcome::Fail).await, Finished::Landed);
}
