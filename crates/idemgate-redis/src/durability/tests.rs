use super::*;

const REPLICATION: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
    slave0:ip=127.0.0.1,port=7001,state=online,offset=120,lag=0\r\n\
    slave1:ip=127.0.0.1,port=7002,state=online,offset=80,lag=9\r\n\
    master_repl_offset:120\r\n";

fn facts(aof: &str, fsync: &str, replication: &str) -> NodeFacts {
    let mut f = NodeFacts {
        appendonly: Some(aof.into()),
        appendfsync: Some(fsync.into()),
        min_replicas: Some("0".into()),
        ..NodeFacts::default()
    };
    f.read_info(replication);
    f
}

#[test]
fn replicas_that_lag_do_not_count_as_acknowledging() {
    let f = facts("no", "everysec", REPLICATION);
    assert_eq!((f.replicas, f.acknowledging), (Some(2), Some(1)));
    let none = facts("no", "everysec", "role:master\r\nconnected_slaves:0\r\n");
    assert_eq!((none.replicas, none.acknowledging), (Some(0), Some(0)));
}

#[test]
fn the_level_is_the_weakest_guarantee_in_place() {
    let level = |aof: &str, fsync: &str, wait: Wait| facts(aof, fsync, REPLICATION).judge(wait).0;
    assert_eq!(level("no", "everysec", None), DurabilityLevel::Volatile);
    assert_eq!(level("yes", "everysec", None), DurabilityLevel::Volatile);
    assert_eq!(level("yes", "no", None), DurabilityLevel::Volatile);
    assert_eq!(level("yes", "always", None), DurabilityLevel::Local);
    assert_eq!(
        level("no", "everysec", Some((1, 500))),
        DurabilityLevel::Replicated
    );
    // two asked for, one acknowledging: persistence decides, and new keys are refused
    let (lvl, summary, refusing) = facts("yes", "always", REPLICATION).judge(Some((2, 500)));
    assert_eq!(lvl, DurabilityLevel::Local);
    assert!(refusing.is_some_and(|r| r.contains("503")), "{summary}");
}

#[test]
fn summaries_say_what_is_lost() {
    let (_, volatile, _) = facts("no", "everysec", REPLICATION).judge(None);
    assert!(volatile.contains("appendonly no") && volatile.contains("restart loses"));
    assert!(
        volatile.contains("failover to a lagging replica"),
        "{volatile}"
    );
    let (_, replicated, refusing) = facts("no", "everysec", REPLICATION).judge(Some((1, 500)));
    assert!(replicated.contains("waits for 1 replica acknowledgement (WAIT"));
    assert!(replicated.contains("does not make Redis strongly consistent"));
    assert_eq!(refusing, None);
}

#[test]
fn without_config_the_info_sections_answer() {
    let mut f = NodeFacts {
        config_refused: Some("ERR unknown command 'CONFIG'".into()),
        ..NodeFacts::default()
    };
    f.read_info("# Persistence\r\naof_enabled:1\r\n");
    f.read_info(REPLICATION);
    assert_eq!(f.appendonly.as_deref(), Some("yes"));
    let (level, summary, _) = f.judge(None);
    assert_eq!(level, DurabilityLevel::Volatile);
    assert!(summary.contains("appendfsync unknown"), "{summary}");
    let mut out = Vec::new();
    f.facts(&None, &mut out);
    assert!(out
        .iter()
        .any(|(n, v)| n == "CONFIG GET" && v.starts_with("refused")));
    assert!(out.contains(&("appendfsync".into(), "unknown".into())));
}
