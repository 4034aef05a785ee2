// vak ui: everything the agent can influence (hosts, paths, reasons) is
// put on the page as text (textContent), never as markup.
"use strict";

const token = document.querySelector('meta[name="vak-token"]').content;
const asks = new Map(); // "gateway/id" -> {gateway, ask}
// Asks the event stream reported answered or expired: a state snapshot
// fetched before that must not bring their cards back (ids are not reused).
const endedAsks = new Set();
const gateways = new Map(); // name -> its state
const maxRows = 500;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    if (c instanceof Node) { const td = el("td"); td.appendChild(c); tr.appendChild(td); }
    else tr.appendChild(el("td", c));
  }
  return tr;
}

function clock(t) {
  const d = new Date(t);
  return isNaN(d) || d.getFullYear() < 2000 ? "" : d.toLocaleTimeString();
}

function target(r) {
  let s = (r.method ? r.method + " " : "") + (r.host || "");
  if (r.port) s += ":" + r.port;
  return s + (r.path || "");
}

const knownLogs = new Set();
let refreshSoon = null;

function addDecision(r) {
  if (!knownLogs.has(r.log) && !refreshSoon) {
    // A new receipts log: list it (and its verification) soon.
    refreshSoon = setTimeout(() => { refreshSoon = null; refresh(); }, 300);
  }
  const body = document.querySelector("#decisions tbody");
  const d = el("span", r.decision, r.decision === "allow" ? "allow" : "deny");
  const why = r.reason || (r.rule_name ? "rule " + r.rule + " (" + r.rule_name + ")" : "");
  const tr = row([clock(r.time), d, target(r), why, r.status || "", r.log]);
  tr.className = "decision";
  tr.dataset.host = r.host || "";
  tr.dataset.path = r.path || "";
  tr.dataset.decision = r.decision;
  tr.dataset.time = r.time;
  tr.dataset.seen = Date.now();
  body.insertBefore(tr, body.firstChild);
  while (body.children.length > maxRows) body.removeChild(body.lastChild);
}

function gatewayLabel(name) {
  const g = gateways.get(name);
  return "gateway " + name + (g && g.workspace ? " (workspace " + g.workspace + ")" : "");
}

function askMeta(gateway, ask) {
  const left = Math.max(0, Math.round((new Date(ask.expires) - Date.now()) / 1000));
  return "ask " + ask.id + " · " + gatewayLabel(gateway) + " · " + ask.count + " waiting · first " +
    clock(ask.first) + " · refused in " + left + " s unless answered";
}

// renderAsks brings the cards in line with asks: new ones are added, gone
// ones removed, the others keep their state (an answer in flight).
function renderAsks() {
  const box = document.getElementById("asks");
  const n = asks.size;
  const count = document.getElementById("asks-count");
  count.textContent = n;
  count.className = n ? "count" : "count zero";
  document.title = n ? "(" + n + ") vak" : "vak";
  const cards = new Map();
  for (const c of box.querySelectorAll(".ask")) cards.set(c.dataset.key, c);
  for (const [key, c] of cards) if (!asks.has(key)) c.remove();
  for (const [key, {gateway, ask}] of asks) {
    const have = cards.get(key);
    if (have) { have.querySelector(".meta").textContent = askMeta(gateway, ask); continue; }
    box.appendChild(askCard(key, gateway, ask));
  }
  let empty = box.querySelector(".empty");
  if (n && empty) empty.remove();
  if (!n && !empty) box.appendChild(el("p", "No request is waiting.", "empty"));
}

function askCard(key, gateway, ask) {
  const card = el("div", null, "ask");
  card.dataset.key = key;
  card.dataset.gateway = gateway;
  card.dataset.id = ask.id;
  card.dataset.target = target(ask);
  card.appendChild(el("div", target(ask), "target"));
  card.appendChild(el("div", askMeta(gateway, ask), "meta"));
  const result = el("span", "", "result");
  const button = (label, verb, scope, cls) => {
    const b = el("button", label, cls);
    b.type = "button";
    b.dataset.action = verb + (scope ? "-" + scope : "");
    b.addEventListener("click", () => answer(gateway, ask.id, verb, scope, result, card));
    card.appendChild(b);
  };
  button("Allow once", "allow", "once", "allow-btn");
  button("Allow for this run", "allow", "run", "allow-btn");
  button("Always allow (adds a rule)", "allow", "always", "allow-btn");
  button("Deny", "deny", "", "deny-btn");
  button("Always deny (adds a rule)", "deny", "always", "deny-btn");
  card.appendChild(result);
  return card;
}

async function answer(gateway, id, verb, scope, result, card) {
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  result.className = "result";
  result.textContent = "answering...";
  const q = scope ? "?scope=" + encodeURIComponent(scope) : "";
  try {
    const resp = await fetch("/api/asks/" + encodeURIComponent(gateway) + "/" + encodeURIComponent(id) + "/" + verb + q, {
      method: "POST", headers: {"X-Vak-Token": token}, credentials: "same-origin",
    });
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.error || resp.statusText);
    result.className = "result ok";
    result.textContent = body.done;
  } catch (e) {
    result.className = "result bad";
    result.textContent = String(e.message || e);
    for (const b of card.querySelectorAll("button")) b.disabled = false;
  }
}

function onAsk(e) {
  const key = e.gateway + "/" + e.ask.id;
  if (e.kind === "ask") {
    if (!endedAsks.has(key)) asks.set(key, {gateway: e.gateway, ask: e.ask});
  } else {
    endedAsks.add(key);
    asks.delete(key);
  }
  renderAsks();
}

function renderGateways(list) {
  const box = document.getElementById("gateways");
  box.replaceChildren();
  for (const g of list) {
    const b = el("span", gatewayLabel(g.name) + (g.running ? ": running" : ": not running"), "badge " + (g.running ? "on" : "off"));
    b.title = (g.socket || "") + (g.error ? "\n" + g.error : "");
    box.appendChild(b);
  }
}
function onGateway(g) {
  if (g.gone) gateways.delete(g.name);
  else gateways.set(g.name, g);
  renderGateways([...gateways.values()]);
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const r of rows) body.appendChild(row(r));
}

async function refresh() {
  // Asks pending when the snapshot was asked for; one that arrives on the
  // event stream meanwhile is not in the snapshot, and stays.
  const before = new Set(asks.keys());
  let st;
  try {
    const resp = await fetch("/api/state", {credentials: "same-origin"});
    if (!resp.ok) throw new Error(await resp.text());
    st = await resp.json();
  } catch (e) {
    document.getElementById("errors").textContent = String(e.message || e);
    return;
  }
  gateways.clear();
  for (const g of st.gateways) gateways.set(g.name, g);
  renderGateways([...gateways.values()]);
  const rules = st.rules ? st.rules.rules : [];
  document.getElementById("rules-file").textContent = st.rules ?
    st.rules.file + " · policy " + (st.rules.mode || "none") + " · ask " + (st.rules.ask ? "on" : "off") +
    " · every workspace's gateway decides by these; the first match decides" : "";
  fill("rules", rules.map((r, i) => [i, r.name, r.action, r.proto, r.hosts, r.methods || "", r.ports || "", r.paths || ""]));
  fill("sessions", st.sessions.map(s => [s.id, s.workspace, s.backend, s.network, s.state, s.created || ""]));
  for (const l of st.receipts) knownLogs.add(l.path);
  fill("receipts", st.receipts.map(l => {
    const v = el("span", l.verified ? (l.signed ? "verified, signed" : "verified (hash chain)") : "FAILS: " + l.problem, l.verified ? "allow" : "deny");
    return [l.path, l.records, clock(l.first), clock(l.last), v];
  }));
  document.getElementById("errors").textContent = (st.errors || []).join("\n");
  const pending = new Map();
  for (const a of st.asks) {
    const key = a.gateway + "/" + a.ask.id;
    if (!endedAsks.has(key)) pending.set(key, {gateway: a.gateway, ask: a.ask});
  }
  for (const key of [...asks.keys()]) if (before.has(key) && !pending.has(key)) asks.delete(key);
  for (const [key, v] of pending) asks.set(key, v);
  renderAsks();
}

function connect() {
  const conn = document.getElementById("conn");
  const es = new EventSource("/api/events");
  es.onopen = () => { conn.textContent = "live"; conn.className = "badge on"; };
  es.onerror = () => { conn.textContent = "reconnecting"; conn.className = "badge off"; };
  es.addEventListener("decision", m => addDecision(JSON.parse(m.data)));
  es.addEventListener("ask", m => onAsk(JSON.parse(m.data)));
  es.addEventListener("gateway", m => onGateway(JSON.parse(m.data)));
}

connect();
refresh();
setInterval(refresh, 3000);
setInterval(renderAsks, 1000);
