// evdb Admin UI: log in, show the server-rendered parts of the UI, confirm and send the node's own calls.
// Credentials stay in this tab's sessionStorage and go out as `Authorization: Basic` on each request.
"use strict";

(() => {
  const AUTH = "evdb.authorization";
  const USER = "evdb.user";
  const POLL_MS = 1000;
  const AUTO_POLL_MS = 5000;
  const $ = (selector, root = document) => root.querySelector(selector);
  let generation = 0; // bumped on each navigation: polls of an older page stop
  const timers = new Set();

  // -- talking to the node ------------------------------------------------------------------------
  function basic(user, password) {
    const bytes = new TextEncoder().encode(`${user}:${password}`);
    let binary = "";
    bytes.forEach((b) => { binary += String.fromCharCode(b); });
    return `Basic ${btoa(binary)}`;
  }

  async function send(method, url, accept = "application/json") {
    const headers = { "X-Requested-With": "XMLHttpRequest", Accept: accept };
    const authorization = sessionStorage.getItem(AUTH);
    if (authorization) headers.Authorization = authorization;
    try {
      const response = await fetch(url, { method, headers, credentials: "omit", cache: "no-store" });
      const text = await response.text();
      return { method, url, status: response.status, statusText: response.statusText, ok: response.ok, text };
    } catch (error) {
      return { method, url, status: 0, statusText: "no answer", ok: false, text: String(error) };
    }
  }

  function answerLine(r) {
    return `${r.method} ${r.url} → ${r.status || ""} ${r.statusText}`.replace(/\s+$/, "");
  }

  // -- messages -------------------------------------------------------------------------------------
  function showMessage(kind, title, body = "") {
    const box = $("#message");
    box.replaceChildren();
    box.className = `message ${kind}`;
    const strong = document.createElement("strong");
    strong.textContent = title;
    box.append(strong);
    if (body) {
      const pre = document.createElement("pre");
      pre.className = "node-answer";
      pre.textContent = body; // exactly what the node sent
      box.append(pre);
    }
    box.hidden = false;
  }

  function showAnswer(r, success) {
    if (r.ok) showMessage("ok", success ? success(r) : answerLine(r));
    else showMessage("error", answerLine(r), r.text);
  }

  function errorBox(r) {
    const section = document.createElement("section");
    section.className = "card error";
    section.id = "node-error";
    const h = document.createElement("h2");
    h.textContent = answerLine(r);
    const pre = document.createElement("pre");
    pre.className = "node-answer";
    pre.textContent = r.text;
    section.append(h, pre);
    return section;
  }

  // -- confirmation ---------------------------------------------------------------------------------
  function confirmCall(method, url, note) {
    const dialog = $("#confirm");
    $("#confirm-call").textContent = `${method} ${url}`;
    $("#confirm-note").textContent = note || "";
    $("#confirm-as").textContent = `Sent as ${sessionStorage.getItem(USER) || "?"} to ${location.host}.`;
    dialog.returnValue = "cancel";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "send"), { once: true });
      dialog.showModal();
      $("#confirm-cancel").focus();
    });
  }

  // -- login ----------------------------------------------------------------------------------------
  function loggedIn() {
    return Boolean(sessionStorage.getItem(AUTH));
  }

  function showLogin() {
    $("#login").hidden = false;
    $("#content").hidden = true;
    $("#content").replaceChildren();
    $("#nav").hidden = true;
    $("#open-stream").hidden = true;
    $("#who").hidden = true;
    $("#login-user").focus();
  }

  function showApp() {
    $("#login").hidden = true;
    $("#content").hidden = false;
    $("#nav").hidden = false;
    $("#open-stream").hidden = false;
    $("#who").hidden = false;
    $("#user").textContent = sessionStorage.getItem(USER) || "";
  }

  function logOut(reason) {
    generation += 1;
    clearTimers();
    sessionStorage.removeItem(AUTH);
    sessionStorage.removeItem(USER);
    showLogin();
    if (reason) showMessage("error", reason.title, reason.body);
    else $("#message").hidden = true;
  }

  async function logIn(event) {
    event.preventDefault();
    const user = $("#login-user").value;
    sessionStorage.setItem(AUTH, basic(user, $("#login-password").value));
    sessionStorage.setItem(USER, user);
    const r = await send("GET", "/web/fragments/cluster", "text/html");
    if (r.status === 401) {
      logOut({ title: `${answerLine(r)}: wrong user name or password.`, body: r.text });
      return;
    }
    $("#login-password").value = "";
    $("#message").hidden = true;
    showApp();
    await route();
  }

  // -- navigation -----------------------------------------------------------------------------------
  function clearTimers() {
    timers.forEach((t) => clearTimeout(t));
    timers.clear();
  }

  function later(fn, ms) {
    const t = setTimeout(() => { timers.delete(t); fn(); }, ms);
    timers.add(t);
  }

  function fragmentUrl() {
    let path = location.hash.slice(1) || "/cluster";
    if (!path.startsWith("/")) path = `/${path}`;
    const url = new URL(`/web/fragments${path}`, location.origin);
    if (!url.pathname.startsWith("/web/fragments/")) return null;
    return url.pathname + url.search;
  }

  async function route() {
    if (!loggedIn()) { showLogin(); return; }
    const gen = ++generation;
    clearTimers();
    const url = fragmentUrl();
    const content = $("#content");
    const section = (location.hash.slice(2) || "cluster").split(/[/?]/)[0];
    document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.section === section));
    if (url === null) {
      content.replaceChildren(errorBox({ method: "GET", url: location.hash, status: 0, statusText: "not a page of this UI", text: "" }));
      return;
    }
    const r = await send("GET", url, "text/html");
    if (gen !== generation) return;
    if (r.status === 401) {
      logOut({ title: `${answerLine(r)}: log in again.`, body: r.text });
      return;
    }
    if (!r.ok) {
      content.replaceChildren(errorBox(r));
      return;
    }
    content.innerHTML = r.text; // rendered and escaped by the node
    wire(content, gen);
  }

  // -- the parts of a page --------------------------------------------------------------------------
  function parse(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    return template.content;
  }

  function wire(root, gen) {
    root.querySelectorAll("[data-poll]").forEach((el) => schedulePoll(el, gen));
    root.querySelectorAll("button[data-method][data-url]").forEach((button) => {
      button.addEventListener("click", () => callButton(button, gen));
    });
    const form = $("#start-scavenge", root);
    if (form) form.addEventListener("submit", (event) => startScavenge(event, form, gen));
    root.querySelectorAll("[data-auto-scavenge]").forEach((box) => autoScavenge(box, gen));
  }

  function schedulePoll(el, gen) {
    later(() => poll(el.id, el.dataset.poll, gen), POLL_MS);
  }

  async function poll(id, url, gen) {
    if (gen !== generation) return;
    const el = document.getElementById(id);
    if (!el) return;
    const r = await send("GET", url, "text/html");
    if (gen !== generation) return;
    if (r.status === 401) { logOut({ title: `${answerLine(r)}: log in again.`, body: r.text }); return; }
    if (!r.ok) {
      el.replaceChildren(errorBox(r));
      later(() => poll(id, url, gen), POLL_MS * 3);
      return;
    }
    const fresh = parse(r.text).firstElementChild;
    if (!fresh) return;
    const changed = fresh.dataset.scavengeState !== el.dataset.scavengeState
      || fresh.dataset.lastId !== el.dataset.lastId
      || fresh.dataset.lastResult !== el.dataset.lastResult
      || fresh.dataset.phase !== el.dataset.phase;
    el.replaceWith(fresh);
    fresh.querySelectorAll("button[data-method][data-url]").forEach((button) => {
      button.addEventListener("click", () => callButton(button, gen));
    });
    if (changed) await refreshHistory(gen);
    schedulePoll(fresh, gen);
  }

  async function refreshNow(gen) {
    const el = $("#current-scavenge");
    if (el) { clearTimers(); await poll(el.id, el.dataset.poll, gen); }
    const box = $("[data-auto-scavenge]");
    if (box) autoScavenge(box, gen);
  }

  async function refreshHistory(gen) {
    const history = $("#history");
    if (!history) return;
    const r = await send("GET", "/web/fragments/admin", "text/html");
    if (gen !== generation || !r.ok) return;
    const fresh = parse(r.text).querySelector("#history");
    const current = $("#history");
    if (fresh && current) current.replaceWith(fresh);
  }

  async function callButton(button, gen) {
    const { method, url, note } = button.dataset;
    if (!(await confirmCall(method, url, note))) return;
    button.disabled = true;
    const r = await send(method, url);
    showAnswer(r, (ok) => (method === "DELETE" ? `Stopped scavenge ${parseJson(ok.text) ?? ok.text}.` : answerLine(ok)));
    await refreshNow(gen);
  }

  function parseJson(text) {
    try { return JSON.parse(text); } catch { return undefined; }
  }

  async function startScavenge(event, form, gen) {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const name of ["threads", "threshold", "throttlePercent"]) {
      const value = form.elements[name].value.trim();
      if (value !== "") params.set(name, value); // empty: the node's default; anything else the node checks
    }
    params.set("syncOnly", form.elements.syncOnly.checked ? "true" : "false");
    const url = `${form.dataset.url}?${params}`;
    if (!(await confirmCall("POST", url, form.dataset.note))) return;
    const r = await send("POST", url);
    showAnswer(r, (ok) => `Scavenge started: ${parseJson(ok.text)?.scavengeId ?? ok.text}`);
    await refreshNow(gen);
  }

  // -- auto-scavenge --------------------------------------------------------------------------------
  function parseSpan(text) {
    const m = /^(?:(\d+)\.)?(\d+):(\d{2}):(\d{2})(?:\.(\d+))?$/.exec(text || "");
    if (!m) return null;
    return ((Number(m[1] || 0) * 24 + Number(m[2])) * 60 + Number(m[3])) * 60 + Number(m[4]);
  }

  function formatSpan(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    const days = Math.floor(s / 86400);
    const hms = [Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60), s % 60]
      .map((n) => String(n).padStart(2, "0")).join(":");
    return days ? `${days}d ${hms}` : hms;
  }

  function line(label, value, id) {
    const p = document.createElement("p");
    const b = document.createElement("b");
    b.textContent = `${label}: `;
    const span = document.createElement("span");
    span.textContent = value;
    if (id) span.id = id;
    p.append(b, span);
    return p;
  }

  async function autoScavenge(box, gen) {
    const run = (box.evdbRun = (box.evdbRun || 0) + 1); // a newer refresh of this box wins
    const stale = () => gen !== generation || box.evdbRun !== run;
    const enabled = await send("GET", "/auto-scavenge/enabled");
    if (stale()) return;
    box.querySelectorAll(".auto-body").forEach((n) => n.remove());
    const body = document.createElement("div");
    body.className = "auto-body";
    const state = $("#auto-state", box);
    if (enabled.status === 404) {
      box.dataset.autoState = "unavailable";
      state.textContent = `Auto-scavenge is not available on this node (${answerLine(enabled)}).`;
      return;
    }
    if (!enabled.ok) {
      box.dataset.autoState = "error";
      state.textContent = "";
      body.append(errorBox(enabled));
      box.append(body);
      return;
    }
    if (!parseJson(enabled.text)?.enabled) {
      box.dataset.autoState = "disabled";
      state.textContent = "Auto-scavenge is disabled on this node.";
      return;
    }
    const status = await send("GET", "/auto-scavenge/status");
    if (stale()) return;
    if (!status.ok) {
      box.dataset.autoState = "error";
      state.textContent = "";
      body.append(errorBox(status));
      box.append(body);
      later(() => { if (!stale()) autoScavenge(box, gen); }, AUTO_POLL_MS);
      return;
    }
    const s = parseJson(status.text) || {};
    box.dataset.autoState = s.state || "";
    state.textContent = "";
    body.append(line("State", s.state || "unknown", "auto-state-name"));
    body.append(line("Schedule", s.schedule || "none set", "auto-schedule"));
    const left = parseSpan(s.timeUntilNextCycle);
    const countdown = line("Next cluster scavenge in", left === null ? "—" : formatSpan(left), "auto-countdown");
    body.append(countdown);
    if (left !== null && s.state === "Waiting") {
      const start = Date.now();
      const tick = () => {
        if (stale() || !countdown.isConnected) return;
        $("#auto-countdown", box).textContent = formatSpan(left - (Date.now() - start) / 1000);
        later(tick, 1000);
      };
      later(tick, 1000);
    }
    const verb = s.state === "Paused" ? "resume" : ["Waiting", "InProgress"].includes(s.state) ? "pause" : null;
    if (verb) {
      const button = document.createElement("button");
      button.type = "button";
      button.id = `auto-${verb}`;
      button.textContent = verb === "pause" ? "Pause auto-scavenge" : "Resume auto-scavenge";
      button.dataset.method = "POST";
      button.dataset.url = `/auto-scavenge/${verb}`;
      button.dataset.note = verb === "pause"
        ? "No further node scavenges start until resumed; a running one is stopped."
        : "The cluster scavenge continues where it left off.";
      button.addEventListener("click", () => callButton(button, gen));
      body.append(button);
    }
    box.append(body);
    later(() => { if (!stale()) autoScavenge(box, gen); }, AUTO_POLL_MS);
  }

  // -- start ----------------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", () => {
    $("#login").addEventListener("submit", logIn);
    $("#logout").addEventListener("click", () => logOut(null));
    $("#open-stream").addEventListener("submit", (event) => {
      event.preventDefault();
      const name = $("#open-stream-name").value.trim();
      if (name) location.hash = `#/streams/${encodeURIComponent(name)}`;
    });
    window.addEventListener("hashchange", route);
    if (loggedIn()) { showApp(); route(); } else showLogin();
  });
})();
