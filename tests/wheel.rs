//! The Python wheel as a user gets it: built by maturin from this checkout, installed into a
//! fresh virtual environment, and used from there: `mpipec --version` on the environment's
//! PATH, `import mpipec` from the installed files (not the checkout's `python/`), and the Python
//! tests in tests/python/ against it. maturin comes from `scripts/wheel-env`; the wheel reuses
//! the debug build `cargo test` has just made (same target directory and profile); the torch
//! environment of `scripts/torch-env` lends its pip for the install and its packages through a
//! `.pth` file, so nothing but maturin is downloaded.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn checked(what: &str, command: &mut Command) -> Output {
    let o = command.output().unwrap_or_else(|e| panic!("{what}: cannot start it: {e}"));
    assert!(
        o.status.success(),
        "{what} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// What `bash scripts/NAME` prints: the path of the tool it provides.
fn script(name: &str) -> PathBuf {
    PathBuf::from(common::setup(name))
}

/// Builds the wheel into `dist` with the debug binary this test run already has.
fn build_wheel(dist: &Path) -> PathBuf {
    let profile_dir = Path::new(env!("CARGO_BIN_EXE_mpipec")).parent().expect("the binary lies in TARGET/PROFILE");
    let target_dir = profile_dir.parent().expect("the binary lies in TARGET/PROFILE");
    // Cargo's `dev` profile builds into `debug`; every other profile into its own name.
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(name) => name,
    };
    checked(
        "maturin build",
        Command::new(script("wheel-env"))
            // Stored: deflating the 60 MB debug binary took most of the build.
            .args(["build", "--profile", profile, "--auditwheel", "skip", "--compression-method", "stored", "--out"])
            .arg(dist)
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(common::root()),
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(dist).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(wheels.len(), 1, "one wheel: {wheels:?}");
    wheels.into_iter().next().unwrap()
}

/// A fresh virtual environment with `wheel` installed by pip, whose imports also reach the
/// cached torch environment. The torch environment's pip installs it (`pip --python`): seeding
/// the new environment with a pip of its own took most of this test's time.
fn fresh_venv(dir: &Path, wheel: &Path) -> PathBuf {
    let torch = script("torch-env");
    checked("python -m venv", Command::new(&torch).args(["-m", "venv", "--without-pip"]).arg(dir));
    let python = dir.join("bin").join("python");
    checked(
        "pip install",
        Command::new(&torch)
            .args(["-m", "pip", "--python"])
            .arg(&python)
            .args(["install", "--quiet", "--disable-pip-version-check", "--no-index", "--no-deps"])
            .arg(wheel),
    );
    let site = |python: &Path| {
        let o = checked(
            "sysconfig",
            Command::new(python).args(["-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]),
        );
        PathBuf::from(stdout(&o))
    };
    std::fs::write(site(&python).join("mpipec-torch-env.pth"), format!("{}\n", site(&torch).display())).unwrap();
    python
}

#[test]
fn the_wheel_installs_and_passes_the_python_tests() {
    let scratch = std::env::temp_dir().join(format!("mpipec-wheel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let wheel = build_wheel(&scratch.join("dist"));
    let venv = scratch.join("venv");
    let python = fresh_venv(&venv, &wheel);
    let bin = venv.join("bin");
    let run = |program: &Path, args: &[&str], what: &str| {
        checked(
            what,
            Command::new(program)
                .args(args)
                .current_dir(&scratch)
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env_remove("MPIPEC_BINARY")
                .env_remove("PYTHONPATH"),
        )
    };
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(stdout(&run(Path::new("mpipec"), &["--version"], "mpipec --version")), format!("mpipec {version}"));
    let probe = "import importlib.metadata as m, mpipec, mpipec._binary as b; \
                 print(mpipec.__file__, b.find(), mpipec.__version__, m.version('mpipec'))";
    let o = run(&python, &["-c", probe], "import mpipec");
    let found: Vec<String> = stdout(&o).split(' ').map(String::from).collect();
    assert!(found[0].starts_with(&venv.to_string_lossy().into_owned()), "mpipec imported from {}", found[0]);
    assert_eq!(Path::new(&found[1]), bin.join("mpipec"), "the wheel's binary is the one run");
    assert_eq!(found[2..], [version, version], "one version for the crate, the package and the wheel");
    let tests = common::root().join("tests").join("python");
    let tests = tests.to_str().unwrap();
    run(&python, &["-m", "unittest", "discover", "-s", tests, "-t", tests], "the Python tests");
    std::fs::remove_dir_all(&scratch).unwrap();
}
