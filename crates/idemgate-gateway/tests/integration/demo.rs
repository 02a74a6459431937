//! `idemgate demo`: every incident charges more than once without the gateway and exactly
//! once with it.

/// The binary's gateway for the demo, compiled here too.
#[path = "../../src/demo.rs"]
mod gateway;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_incident_charges_once_through_the_gateway() {
    let incidents = idemgate_demo::run_incidents(gateway::spawn_gateway)
        .await
        .unwrap();
    assert_eq!(incidents.len(), 5);
    for inc in incidents {
        assert!(inc.without.charges > 1, "{}: {:?}", inc.name, inc.without);
        assert_eq!(inc.with.charges, 1, "{}: {:?}", inc.name, inc.with);
    }
}
