//! `cargo xtask build-vm`: the in-browser Linux (docs/IN-BROWSER.md) into `dist/vm/`, from
//! registry packages only: v86 from npm; SeaBIOS, busybox (i386) and the kernel's source from
//! Debian; ackscope's probe built here for i686 musl. Nothing of it is committed: the static
//! site carries `dist/vm/`, and the page offers "run it on the Linux in this tab" when it finds
//! `vm/vm.json` beside it.
//!
//! Works in `target/vm/` and keeps what it made there (the kernel takes 3 to 4 minutes on 2
//! cores, once): a second run only copies. The probe's build leaves `dist/vm/` out of the binary
//! (the probe's page has a real kernel to run on), and the web app's build leaves it in place.

use std::fs;
use std::path::{Path, PathBuf};

use crate::setup::{self, tool_command};
use crate::steps::{RunExt, Steps};

/// The emulator, pinned: the page's worker (vm/worker.js) uses its API.
const V86_VERSION: &str = "0.5.462";
/// The kernel's source, as Debian packages it (the version the guest reports comes from it).
const KERNEL_SOURCE: &str = "linux-source-6.1";
const GUEST_TARGET: &str = "i686-unknown-linux-musl";
/// Options tinyconfig or `vm/kernel.options` would leave on, turned off: the one compression
/// (gzip), the one tick rate (1000 Hz), and a kernel that may be preempted.
const KERNEL_OFF: [&str; 10] = [
    "KERNEL_XZ",
    "KERNEL_LZMA",
    "KERNEL_BZIP2",
    "KERNEL_LZO",
    "KERNEL_LZ4",
    "KERNEL_ZSTD",
    "HZ_100",
    "HZ_250",
    "HZ_300",
    "PREEMPT_NONE",
];
/// What building the kernel needs besides the C compiler Rust links with: Debian's packages of
/// the same names.
const KERNEL_TOOLS: [&str; 4] = ["make", "flex", "bison", "bc"];

/// The files the page fetches, all in `dist/vm/`.
const SITE_FILES: [&str; 9] = [
    "libv86.js",
    "v86.wasm",
    "bios.bin",
    "vgabios-stdvga.bin",
    "bzImage",
    "initrd.gz",
    "worker.js",
    "machine.js",
    "vm.json",
];

pub fn run() -> Result<(), String> {
    let root = setup::root();
    let work = setup::target_dir().join("vm");
    let site = root.join("dist/vm");
    for dir in [&work, &site] {
        fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let mut steps = Steps::new(6);

    steps.start(&format!("v86 {V86_VERSION} (npm)"));
    let package = work.join(format!("v86-{V86_VERSION}.tgz"));
    if !package.is_file() {
        tool_command("npm")
            .args(["pack", "--silent", &format!("v86@{V86_VERSION}"), "--pack-destination"])
            .arg(&work)
            .run()
            .map_err(|e| format!("{e}\nv86 comes from npm: install Node.js and npm first"))?;
    }
    tool_command("tar")
        .arg("-xzf")
        .arg(&package)
        .arg("-C")
        .arg(&work)
        .args(["package/build/libv86.js", "package/build/v86.wasm"])
        .run()?;
    for file in ["libv86.js", "v86.wasm"] {
        copy(&work.join("package/build").join(file), &site.join(file))?;
    }
    steps.done("libv86.js, v86.wasm");

    steps.start("Debian's SeaBIOS, busybox-static (i386) and kernel source");
    let debs = work.join("debs");
    download_debs(&debs)?;
    let unpacked = work.join("root");
    for deb in ["seabios_", "busybox-static_"] {
        tool_command("dpkg-deb").arg("-x").arg(find_deb(&debs, deb)?).arg(&unpacked).run()?;
    }
    for file in ["bios.bin", "vgabios-stdvga.bin"] {
        copy(&unpacked.join("usr/share/seabios").join(file), &site.join(file))?;
    }
    steps.done(&debs.display().to_string());

    steps.start("the guest's kernel: tinyconfig and vm/kernel.options, HZ=1000");
    let release = build_kernel(&mut steps, &root, &work)?;
    copy(&work.join("bzImage"), &site.join("bzImage"))?;
    steps.done(&format!("Linux {release}"));

    steps.start(&format!("ackscope's probe for {GUEST_TARGET} (static, no web app inside)"));
    let probe = build_guest_probe(&work)?;
    steps.done(&probe.display().to_string());

    steps.start("the initramfs: busybox, vm/init, the probe");
    let initrd = site.join("initrd.gz");
    let files = [
        ("bin/busybox", unpacked.join("bin/busybox")),
        ("init", root.join("vm/init")),
        ("ackscope", probe),
    ];
    write_initramfs(&files, &work.join("initrd.cpio"))?;
    gzip(&work.join("initrd.cpio"), &initrd)?;
    steps.done(&format!("{} bytes", size(&initrd)));

    steps.start("dist/vm/");
    for script in ["worker.js", "machine.js"] {
        copy(&root.join("vm").join(script), &site.join(script))?;
    }
    let manifest = serde_json::json!({
        "kernel": release,
        "emulator": format!("v86 {V86_VERSION}"),
    });
    fs::write(site.join("vm.json"), format!("{manifest:#}\n"))
        .map_err(|e| format!("writing vm.json: {e}"))?;
    let total: u64 = SITE_FILES.iter().map(|file| size(&site.join(file))).sum();
    steps.done(&format!("{} files, {:.1} MB", SITE_FILES.len(), total as f64 / 1e6));
    Ok(())
}

/// Downloads the three packages into `debs` unless they are there. busybox-static is i386's:
/// dpkg's i386 architecture is added for the download and removed after, also on failure.
fn download_debs(debs: &Path) -> Result<(), String> {
    let wanted = ["seabios_", "busybox-static_", &format!("{KERNEL_SOURCE}_")];
    if wanted.iter().all(|prefix| find_deb(debs, prefix).is_ok()) {
        return Ok(());
    }
    if !setup::is_root() {
        return Err("downloading Debian's packages adds dpkg's i386 architecture for a moment: \
                    run `cargo xtask build-vm` as root (or with sudo)"
            .into());
    }
    fs::create_dir_all(debs).map_err(|e| format!("creating {}: {e}", debs.display()))?;
    let foreign = tool_command("dpkg").arg("--print-foreign-architectures").output_text();
    let added = !foreign.unwrap_or_default().lines().any(|arch| arch.trim() == "i386");
    if added {
        tool_command("dpkg").args(["--add-architecture", "i386"]).run()?;
    }
    // apt-get's lists may fail for a mirror or two; the download says whether it matters.
    let _ = tool_command("apt-get").args(["update", "-qq"]).run();
    let downloaded = tool_command("apt-get")
        .args(["download", "-qq", "seabios", "busybox-static:i386", KERNEL_SOURCE])
        .current_dir(debs)
        .run();
    if added {
        let _ = tool_command("dpkg").args(["--remove-architecture", "i386"]).run();
        let _ = tool_command("apt-get").args(["update", "-qq"]).run();
    }
    downloaded
}

fn find_deb(debs: &Path, prefix: &str) -> Result<PathBuf, String> {
    let entries = fs::read_dir(debs).map_err(|e| format!("reading {}: {e}", debs.display()))?;
    entries
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with(prefix) && name.ends_with(".deb")
        })
        .ok_or_else(|| format!("no {prefix}*.deb in {}", debs.display()))
}

/// Builds `work/bzImage` from the kernel's source unless the one there was built with the same
/// options; returns the kernel's release ("6.1.192").
fn build_kernel(steps: &mut Steps, root: &Path, work: &Path) -> Result<String, String> {
    let options = fs::read_to_string(root.join("vm/kernel.options"))
        .map_err(|e| format!("reading vm/kernel.options: {e}"))?;
    // What the kernel was built with, in full: a change to either list builds it again.
    let recipe = format!("{options}\n# off: {}\n", KERNEL_OFF.join(" "));
    let stamp = work.join("bzImage.options");
    let source = work.join("ksrc").join(KERNEL_SOURCE);
    let release_file = source.join("include/config/kernel.release");
    let built = fs::read_to_string(&stamp).ok() == Some(recipe.clone());
    if !(built && work.join("bzImage").is_file() && release_file.is_file()) {
        steps.note("3 to 4 minutes on 2 cores, once");
        let missing: Vec<&str> =
            KERNEL_TOOLS.into_iter().filter(|tool| !has_program(tool)).collect();
        if !missing.is_empty() {
            setup::ensure_apt_packages(steps, &missing)?;
        }
        if !source.join("Makefile").is_file() {
            extract_kernel_source(
                &find_deb(&work.join("debs"), KERNEL_SOURCE)?,
                &work.join("ksrc"),
            )?;
        }
        let make = |args: &[&str]| {
            let mut command = tool_command("make");
            command.current_dir(&source).arg("ARCH=i386").args(args);
            command
        };
        make(&["tinyconfig"]).stdout(std::process::Stdio::null()).run()?;
        let config = |args: &[&str]| {
            let mut command = tool_command("scripts/config");
            command.current_dir(&source).args(args);
            command.run()
        };
        for option in
            options.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            config(&["--enable", option])?;
        }
        for other in KERNEL_OFF {
            config(&["--disable", other])?;
        }
        config(&["--set-val", "HZ", "1000"])?;
        make(&["olddefconfig"]).stdout(std::process::Stdio::null()).run()?;
        let jobs = format!("-j{}", std::thread::available_parallelism().map_or(2, |n| n.get()));
        make(&[&jobs, "bzImage"]).stdout(std::process::Stdio::null()).run()?;
        copy(&source.join("arch/x86/boot/bzImage"), &work.join("bzImage"))?;
        fs::write(&stamp, &recipe).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    }
    let release = fs::read_to_string(&release_file)
        .map_err(|e| format!("reading {}: {e}", release_file.display()))?;
    Ok(release.trim().to_string())
}

/// Debian's package holds the source as one `.tar.xz`: unpacked into `ksrc`.
fn extract_kernel_source(deb: &Path, ksrc: &Path) -> Result<(), String> {
    fs::create_dir_all(ksrc).map_err(|e| format!("creating {}: {e}", ksrc.display()))?;
    let script = format!(
        "dpkg-deb --fsys-tarfile '{}' | tar -x -O --wildcards '*/{KERNEL_SOURCE}.tar.xz' | tar -xJ -C '{}'",
        deb.display(),
        ksrc.display()
    );
    tool_command("sh").args(["-c", &script]).run()
}

fn has_program(program: &str) -> bool {
    tool_command("sh").args(["-c", &format!("command -v {program}")]).run_quietly()
}

/// The release probe for the guest: static (musl), without the web app (an empty dist folder),
/// stripped.
fn build_guest_probe(work: &Path) -> Result<PathBuf, String> {
    let installed = tool_command("rustup").args(["target", "list", "--installed"]).output_text();
    if !installed.is_some_and(|list| list.lines().any(|l| l.trim() == GUEST_TARGET)) {
        tool_command("rustup").args(["target", "add", GUEST_TARGET]).run()?;
    }
    let no_web = work.join("no-web");
    fs::create_dir_all(&no_web).map_err(|e| format!("creating {}: {e}", no_web.display()))?;
    setup::cargo()
        .args(["build", "--release", "--package", "ackscope-probe", "--target", GUEST_TARGET])
        .env("ACKSCOPE_WEB_DIST", &no_web)
        .run()?;
    let built = setup::target_dir().join(GUEST_TARGET).join("release/ackscope");
    let stripped = work.join("ackscope-i686");
    tool_command("strip").arg("-o").arg(&stripped).arg(&built).run()?;
    Ok(stripped)
}

/// An initramfs as the kernel reads one: a cpio archive in the "newc" format (headers of ASCII
/// hex), its directories made from the files' paths, everything owned by root.
fn write_initramfs(files: &[(&str, PathBuf)], out: &Path) -> Result<(), String> {
    let mut archive = Vec::new();
    let mut inode = 1;
    let mut entry = |name: &str, mode: u32, data: &[u8]| {
        let header = format!(
            "070701{inode:08X}{mode:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            0, // uid
            0, // gid
            1, // nlink
            0, // mtime: the same archive from the same files
            data.len(),
            0, // devmajor
            0, // devminor
            0, // rdevmajor
            0, // rdevminor
            name.len() + 1,
            0, // check
        );
        inode += 1;
        archive.extend_from_slice(header.as_bytes());
        archive.extend_from_slice(name.as_bytes());
        archive.push(0);
        archive.resize(archive.len().next_multiple_of(4), 0);
        archive.extend_from_slice(data);
        archive.resize(archive.len().next_multiple_of(4), 0);
    };
    for dir in ["bin", "dev", "proc", "sys", "tmp"] {
        entry(dir, 0o040755, &[]);
    }
    for (name, path) in files {
        let data = fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        entry(name, 0o100755, &data);
    }
    entry("TRAILER!!!", 0, &[]);
    fs::write(out, archive).map_err(|e| format!("writing {}: {e}", out.display()))
}

fn gzip(from: &Path, to: &Path) -> Result<(), String> {
    let out = fs::File::create(to).map_err(|e| format!("creating {}: {e}", to.display()))?;
    tool_command("gzip").args(["-9", "-n", "-c"]).arg(from).stdout(out).run()
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    fs::copy(from, to).map(drop).map_err(|e| format!("copying {}: {e}", from.display()))
}

fn size(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The archive the kernel unpacks: each entry's header, name and data at 4-byte
    /// boundaries, the trailer last.
    #[test]
    fn the_initramfs_is_a_newc_archive_of_the_files() {
        let dir = std::env::temp_dir().join(format!("ackscope-initramfs-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("init");
        fs::write(&file, b"#!/bin/sh\n").unwrap();
        let out = dir.join("initrd.cpio");
        write_initramfs(&[("init", file)], &out).unwrap();
        let archive = fs::read(&out).unwrap();
        let _ = fs::remove_dir_all(&dir);
        let text = String::from_utf8_lossy(&archive);
        assert!(archive.starts_with(b"070701"), "newc's magic first");
        assert_eq!(archive.len() % 4, 0);
        let names: Vec<&str> = ["bin", "dev", "proc", "sys", "tmp", "init", "TRAILER!!!"].into();
        let mut at = 0;
        for name in names {
            let found = text[at..].find(&format!("{name}\0")).expect(name) + at;
            assert_eq!(&text[found - 110..found - 104], "070701", "{name}'s header before it");
            at = found;
        }
        assert!(text.contains("init\0\0#!/bin/sh\n"), "the file's bytes after its name");
    }
}
