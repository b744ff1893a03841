//! Builds the web app into `dist/` without Trunk: cargo for wasm32, wasm-bindgen, wasm-opt.
//!
//! Installing Trunk means compiling it (about 15 minutes on 2 cores), and its build is these
//! three steps plus rewriting `index.html`. `web/index.html`'s `data-trunk` links stay the one
//! description of the assets: `trunk serve` reads them for live reload while working on the app,
//! and this module reads the same links, so the two cannot drift. It knows the kinds the app
//! uses: `rel="css"` (copied), `rel="rust"` (built) and `rel="copy-dir"` (a folder's files
//! copied to `data-target-path`, as Trunk does: the lessons' recordings). Any other kind is an
//! error that names it, rather than an asset silently missing from the page.

use std::fs;
use std::path::Path;

use crate::setup::{self, WASM_TARGET};
use crate::steps::RunExt;

/// One `<link data-trunk ...>` of index.html: where it is in the text and its attributes.
#[derive(Debug, PartialEq)]
struct TrunkLink {
    start: usize,
    end: usize,
    attributes: Vec<(String, String)>,
}

impl TrunkLink {
    fn get(&self, name: &str) -> Option<&str> {
        self.attributes.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }
}

/// Every `<link ...>` that carries `data-trunk`, in order.
fn trunk_links(html: &str) -> Result<Vec<TrunkLink>, String> {
    let mut links = Vec::new();
    let mut from = 0;
    while let Some(offset) = html[from..].find("<link") {
        let start = from + offset;
        let end =
            start + html[start..].find('>').ok_or("web/index.html: a <link> is never closed")? + 1;
        let inner = html[start + "<link".len()..end - 1].trim_end_matches('/');
        let attributes = parse_attributes(inner)?;
        if attributes.iter().any(|(key, _)| key == "data-trunk") {
            links.push(TrunkLink { start, end, attributes });
        }
        from = end;
    }
    Ok(links)
}

/// `a="x" b c="y"` as pairs; a bare name has the empty value.
fn parse_attributes(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut attributes = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let name_end = rest.find(|c: char| c.is_whitespace() || c == '=').unwrap_or(rest.len());
        let name = rest[..name_end].to_string();
        rest = rest[name_end..].trim_start();
        let mut value = String::new();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let quote = after.chars().next().filter(|c| *c == '"' || *c == '\'');
            let Some(quote) = quote else {
                return Err(format!("web/index.html: the value of {name} must be quoted"));
            };
            let close = after[1..]
                .find(quote)
                .ok_or_else(|| format!("web/index.html: the value of {name} is never closed"))?;
            value = after[1..1 + close].to_string();
            rest = after[close + 2..].trim_start();
        }
        attributes.push((name, value));
    }
    Ok(attributes)
}

/// What the page needs, read from index.html's links.
#[derive(Debug, PartialEq)]
struct Plan {
    /// Stylesheets, relative to web/.
    css: Vec<String>,
    /// Folders whose files are copied: (from, relative to web/; to, relative to dist/).
    dirs: Vec<(String, String)>,
    /// The binary to build, the cargo profile of a release build, and the wasm-opt level.
    bin: String,
    profile: String,
    wasm_opt: String,
}

fn plan(links: &[TrunkLink]) -> Result<Plan, String> {
    let mut css = Vec::new();
    let mut dirs = Vec::new();
    let mut rust = None;
    for link in links {
        match link.get("rel") {
            Some("css") => css.push(
                link.get("href").ok_or("web/index.html: a css link has no href")?.to_string(),
            ),
            Some("copy-dir") => {
                let from = link.get("href").ok_or("web/index.html: a copy-dir link has no href")?;
                let to = link.get("data-target-path").ok_or(
                    "web/index.html: a copy-dir link has no data-target-path (where in dist/)",
                )?;
                if to.split('/').any(|part| part == ".." || part.is_empty()) || to.starts_with('/')
                {
                    return Err(format!(
                        "web/index.html: data-target-path {to:?} is not inside dist/"
                    ));
                }
                dirs.push((from.to_string(), to.to_string()));
            }
            Some("rust") if rust.is_none() => rust = Some(link),
            Some("rust") => return Err("web/index.html: more than one rust link".into()),
            other => {
                return Err(format!(
                "web/index.html: a data-trunk link with rel={other:?}, which `cargo xtask build` \
                     does not build (it knows css, copy-dir and rust); add it to \
                     xtask/src/web_build.rs"
            ))
            }
        }
    }
    let rust = rust.ok_or("web/index.html: no data-trunk rust link")?;
    Ok(Plan {
        css,
        dirs,
        bin: rust.get("data-bin").ok_or("web/index.html: the rust link has no data-bin")?.into(),
        profile: rust.get("data-cargo-profile-release").unwrap_or("release").into(),
        wasm_opt: rust.get("data-wasm-opt").unwrap_or("0").into(),
    })
}

/// index.html with each data-trunk link replaced by what it stands for in `dist/`.
fn rewrite_html(html: &str, links: &[TrunkLink], bin: &str) -> String {
    let mut out = String::with_capacity(html.len() + 256);
    let mut from = 0;
    for link in links {
        out.push_str(&html[from..link.start]);
        match link.get("rel") {
            Some("css") => {
                let href = link.get("href").unwrap_or_default();
                out.push_str(&format!(r#"<link rel="stylesheet" href="./{href}" />"#));
            }
            // Files beside the page, nothing in it.
            Some("copy-dir") => {}
            _ => out.push_str(&format!(
                r#"<link rel="modulepreload" href="./{bin}.js" />
    <script type="module">
      import init from "./{bin}.js";
      const wasm = await init({{ module_or_path: "./{bin}_bg.wasm" }});
      // The app's memory, for `cargo xtask bench viewer` to read its size from outside.
      window.ackscopeWasmMemory = wasm.memory;
    </script>"#
            )),
        }
        from = link.end;
    }
    out.push_str(&html[from..]);
    out
}

/// Builds the app into `dist/` (through `dist/.stage`, which the probe's build ignores, so a
/// failed build never leaves half an app to embed).
pub fn build() -> Result<(), String> {
    let root = setup::root();
    let web = root.join("web");
    let html_path = web.join("index.html");
    let html = fs::read_to_string(&html_path)
        .map_err(|e| format!("reading {}: {e}", html_path.display()))?;
    let links = trunk_links(&html)?;
    let plan = plan(&links)?;

    setup::cargo()
        .args(["build", "--target", WASM_TARGET, "--package", "ackscope-web"])
        .args(["--bin", &plan.bin, "--profile", &plan.profile])
        .run()?;
    let wasm = setup::target_dir()
        .join(WASM_TARGET)
        .join(&plan.profile)
        .join(format!("{}.wasm", plan.bin));

    let dist = root.join("dist");
    let stage = dist.join(".stage");
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage).map_err(|e| format!("creating {}: {e}", stage.display()))?;
    setup::tool_command("wasm-bindgen")
        .args(["--target", "web", "--no-typescript", "--out-name", &plan.bin, "--out-dir"])
        .arg(&stage)
        .arg(&wasm)
        .run()?;
    if plan.wasm_opt != "0" {
        let output = stage.join(format!("{}_bg.wasm", plan.bin));
        // The features Rust's wasm32 target emits by default; wasm-opt must be told to keep them.
        setup::tool_command("wasm-opt")
            .arg(format!("-O{}", plan.wasm_opt))
            .args(["--strip-debug", "--strip-producers"])
            .args(["--enable-reference-types", "--enable-bulk-memory", "--enable-sign-ext"])
            .args(["--enable-mutable-globals", "--enable-nontrapping-float-to-int"])
            .args(["--enable-multivalue"])
            .arg(&output)
            .arg("-o")
            .arg(&output)
            .run()?;
    }
    for css in &plan.css {
        copy(&web.join(css), &stage.join(css))?;
    }
    // The folders index.html names: the lessons' recordings, so that the app plays every lesson
    // with no probe (a static copy of dist/ on any host; the probe serves them too).
    for (from, to) in &plan.dirs {
        let from = web.join(from);
        let entries = fs::read_dir(&from)
            .map_err(|e| format!("web/index.html names {}: {e}", from.display()))?;
        for entry in entries.flatten().filter(|entry| entry.path().is_file()) {
            copy(&entry.path(), &stage.join(to).join(entry.file_name()))?;
        }
    }
    let page = rewrite_html(&html, &links, &plan.bin);
    write(&stage.join("index.html"), &page)?;
    write(&stage.join(DECODE_WORKER), &decode_worker(&plan.bin))?;

    offline_page(&page_for_offline(&html, &links), &stage, &plan.bin, &root.join("offline"))?;
    replace_app(&dist, &stage)?;
    write(&root.join(setup::DIST_STAMP), "the web app was last built when this file was written\n")
}

/// The script of the Web Worker that decodes a big file beside the page (`web/src/
/// decode_worker.rs`): a second instance of the app's wasm, whose `main` mounts nothing there.
const DECODE_WORKER: &str = "decode-worker.js";

/// [`DECODE_WORKER`]'s text. It takes `{start}`, then `{bytes}` pieces, then `{end}`, and answers
/// each piece with `{batch, stopped}` and the end with `{end: {problem, tooMany, memoryBytes}}`,
/// in order (each message waits for the one before: they are handled one after the other), or
/// `{failed}`. It compiles the app's wasm itself, on its own thread (handed the module the page
/// had compiled, it started no sooner).
fn decode_worker(bin: &str) -> String {
    format!(
        r#"// Decodes a session file beside the page: web/src/decode_worker.rs. Written by `cargo xtask build`.
import init, {{ WorkerDecoder }} from "./{bin}.js";

let decoder = null;
let memory = null;
let queue = Promise.resolve();
onmessage = ({{ data }}) => {{
  queue = queue.then(async () => {{
    if (data.start) {{
      memory = (await init({{ module_or_path: "./{bin}_bg.wasm" }})).memory;
      decoder = new WorkerDecoder(data.start.maxEvents, data.start.fromRun, data.start.fromFirst ?? 0);
    }} else if (data.bytes) {{
      const batch = decoder.feed(new Uint8Array(data.bytes));
      postMessage({{ batch: batch.buffer, stopped: decoder.stopped }}, [batch.buffer]);
    }} else if (data.end) {{
      const problem = decoder.finish();
      const memoryBytes = memory.buffer.byteLength;
      postMessage({{ end: {{ problem: problem ?? null, tooMany: decoder.tooMany, memoryBytes }} }});
    }}
  }}).catch((error) => postMessage({{ failed: String(error) }}));
}};
"#
    )
}

/// index.html with its module script and stylesheet left as markers for [`offline_page`].
fn page_for_offline(html: &str, links: &[TrunkLink]) -> String {
    let mut out = String::with_capacity(html.len());
    let mut from = 0;
    for link in links {
        out.push_str(&html[from..link.start]);
        out.push_str(match link.get("rel") {
            Some("css") => "<!--ackscope:style-->",
            Some("copy-dir") => "",
            _ => "<!--ackscope:app-->",
        });
        from = link.end;
    }
    out.push_str(&html[from..]);
    out
}

/// `offline/ackscope.html`: the whole app in one file, for a page opened from disk, where a
/// browser loads no module, no wasm and no recording by URL (file:// has no origin). The
/// stylesheet, the loader and the wasm (base64) are inline, and so are the lessons' recordings,
/// which the app takes from `window.ackscopeRecordings` before it tries to fetch them. Kept out
/// of dist/ (so the probe does not embed a second copy).
fn offline_page(page: &str, stage: &Path, bin: &str, out_dir: &Path) -> Result<(), String> {
    let read = |path: &Path| fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()));
    let css = String::from_utf8_lossy(&read(&stage.join("style.css"))?).into_owned();
    let glue = String::from_utf8_lossy(&read(&stage.join(format!("{bin}.js")))?).into_owned();
    let wasm = base64(&read(&stage.join(format!("{bin}_bg.wasm")))?);
    let mut recordings = String::from("{");
    if let Ok(entries) = fs::read_dir(stage.join("lessons/recordings")) {
        let mut names: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        names.sort();
        for path in names {
            let name =
                path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            recordings.push_str(&format!("{name:?}:\"{}\",", base64(&read(&path)?)));
        }
    }
    recordings.push('}');
    let app = format!(
        "<script>window.ackscopeRecordings = {recordings};</script>\n    <script type=\"module\">\n{glue}\n\
         // Names of the loader's own (it declares `wasm`) are left alone.\n\
         const ackscopeBytes = Uint8Array.from(atob(\"{wasm}\"), (c) => c.charCodeAt(0));\n\
         window.ackscopeWasmMemory = (await __wbg_init({{ module_or_path: ackscopeBytes }})).memory;\n    </script>"
    );
    let html = page
        .replace("<!--ackscope:style-->", &format!("<style>\n{css}\n</style>"))
        .replace("<!--ackscope:app-->", &app);
    fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    write(&out_dir.join("ackscope.html"), &html)
}

/// Standard base64 with padding (no crate for this much).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `dist/vm/`: the in-browser Linux (`cargo xtask build-vm`), which the app's build leaves in
/// place.
const VM_DIR: &str = "vm";

/// Replaces the app in `dist` by the one in `stage`: files gone from the app go, changed ones
/// move in, and a file whose bytes did not change is left as it was. That last rule is what
/// keeps rebuilds short: the probe's build script lists the app's files again only when
/// index.html changes (its mtime), and the binary re-embeds only the files that changed.
fn replace_app(dist: &Path, stage: &Path) -> Result<(), String> {
    let names = |dir: &Path| -> Result<Vec<std::ffi::OsString>, String> {
        let entries = fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
        entries.map(|entry| entry.map(|e| e.file_name()).map_err(|e| e.to_string())).collect()
    };
    let staged = names(stage)?;
    let mut listed_anew = false;
    for name in names(dist)? {
        let path = dist.join(&name);
        // The in-browser Linux is `cargo xtask build-vm`'s, not the app's.
        if path != stage && !staged.contains(&name) && name != VM_DIR {
            listed_anew = true;
            let removed =
                if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
            removed.map_err(|e| format!("removing {}: {e}", path.display()))?;
        }
    }
    for name in staged {
        let (from, to) = (stage.join(&name), dist.join(&name));
        listed_anew |= !to.exists();
        let same =
            to.is_file() && fs::read(&from).ok().is_some_and(|new| fs::read(&to).ok() == Some(new));
        if same {
            fs::remove_file(&from).map_err(|e| format!("removing {}: {e}", from.display()))?;
        } else {
            if to.is_dir() {
                fs::remove_dir_all(&to).map_err(|e| format!("removing {}: {e}", to.display()))?;
            }
            fs::rename(&from, &to).map_err(|e| format!("moving {}: {e}", from.display()))?;
        }
    }
    let _ = fs::remove_dir(stage);
    // A file came or went: index.html is written again, however alike, so that the probe's
    // build script (which watches it alone) lists the app's files again.
    if listed_anew {
        let index = dist.join("index.html");
        let page = fs::read(&index).map_err(|e| format!("reading {}: {e}", index.display()))?;
        fs::write(&index, page).map_err(|e| format!("writing {}: {e}", index.display()))?;
    }
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    fs::copy(from, to).map(drop).map_err(|e| format!("copying {}: {e}", from.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decode_worker_loads_the_app_it_is_built_with() {
        let script = decode_worker("app");
        assert!(script.contains(r#"import init, { WorkerDecoder } from "./app.js";"#), "{script}");
        assert!(script.contains(r#"init({ module_or_path: "./app_bg.wasm" })"#), "{script}");
    }

    #[test]
    fn base64_is_the_standard_one() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xff, 0xfe, 0x00, 0x01]), "//4AAQ==");
    }

    const PAGE: &str = r#"<head>
    <link data-trunk rel="css" href="style.css" />
    <link
      data-trunk
      rel="rust"
      data-bin="app"
      data-cargo-profile-release="wasm-release"
      data-wasm-opt="z"
    />
    <link data-trunk rel="copy-dir" href="../lessons/recordings" data-target-path="lessons/recordings" />
    <link rel="icon" href="x.png">
</head>"#;

    #[test]
    fn the_links_of_index_html_are_the_plan() {
        let links = trunk_links(PAGE).expect("links");
        assert_eq!(links.len(), 3, "the icon is not a trunk link");
        let plan = plan(&links).expect("a plan");
        assert_eq!(
            plan,
            Plan {
                css: vec!["style.css".into()],
                dirs: vec![("../lessons/recordings".into(), "lessons/recordings".into())],
                bin: "app".into(),
                profile: "wasm-release".into(),
                wasm_opt: "z".into()
            }
        );
        let html = rewrite_html(PAGE, &links, "app");
        assert!(!html.contains("data-trunk"), "{html}");
        assert!(html.contains(r#"<link rel="stylesheet" href="./style.css" />"#), "{html}");
        assert!(html.contains(r#"import init from "./app.js";"#), "{html}");
        assert!(html.contains(r#"await init({ module_or_path: "./app_bg.wasm" });"#), "{html}");
        assert!(html.contains(r#"<link rel="icon" href="x.png">"#), "other links stay");
        assert_eq!(html.matches("<script").count(), 1, "a folder adds nothing to the page");
        let offline = page_for_offline(PAGE, &links);
        assert_eq!(offline.matches("<!--ackscope:app-->").count(), 1, "{offline}");
    }

    #[test]
    fn an_asset_kind_it_cannot_build_is_named() {
        let links = trunk_links(r#"<link data-trunk rel="sass" href="a.scss" />"#).unwrap();
        let error = plan(&links).unwrap_err();
        assert!(error.contains("rel=Some(\"sass\")"), "{error}");
        let outside = r#"<link data-trunk rel="copy-dir" href="a" data-target-path="../etc" />"#;
        let error = plan(&trunk_links(outside).unwrap()).unwrap_err();
        assert!(error.contains("not inside dist/"), "{error}");
        assert!(trunk_links("<link data-trunk rel=css>").unwrap_err().contains("quoted"));
    }
}
