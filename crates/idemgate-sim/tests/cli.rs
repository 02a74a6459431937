//! `scripts/simulate`'s arguments: a bad one exits 2 naming it, never a panic or a run of
//! other seeds than asked.

use std::process::Command;

fn simulate(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_simulate"))
        .args(args)
        .output()
        .expect("simulate runs");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text.into_owned())
}

#[test]
fn bad_arguments_exit_2_naming_them() {
    for (args, named) in [
        (&["--seed", "abc"][..], "--seed"),
        (&["0"][..], "SEEDS"),
        (&["5", "--bogus"][..], "--bogus"),
        (&["3", "--seed", "5"][..], "--seed"),
        (&["5", "--planted", "nope"][..], "renew-unfenced"),
        (&["5", "--path", "nope"][..], "tower or proxy"),
        (&["5", "--from", "18446744073709551615"][..], "--from"),
    ] {
        let (code, text) = simulate(args);
        assert_eq!(code, 2, "{args:?}: {text}");
        assert!(text.contains(named), "{args:?}: {text}");
        assert!(!text.contains("panicked"), "{args:?}: {text}");
    }
}

#[test]
fn the_count_is_read_wherever_it_stands() {
    let (code, text) = simulate(&["--path", "tower", "3", "--from", "10"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("3 seeds in"), "{text}");
}
