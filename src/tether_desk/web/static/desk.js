// tether desk: follows running traces over server-sent events. Text is inserted with
// textContent only, so nothing a model or a customer wrote can become markup or script.
"use strict";

function row(ev) {
  const li = document.createElement("li");
  li.className = "ev ev-" + ev.kind;
  const kind = document.createElement("span");
  kind.className = "kind";
  kind.textContent = ev.kind.replace(/_/g, " ");
  li.appendChild(kind);
  const d = ev.data || {};
  let text = "";
  if (ev.kind === "model_request") text = "turn " + d.turn + ": request with " + d.messages + " message(s)";
  else if (ev.kind === "model_response") text = "turn " + d.turn + ": " + d.stop + " " + (d.calls || []).map(c => c.tool + "(" + c.arguments + ")").join(" ") + (d.text ? " \u201c" + d.text + "\u201d" : "") + " (" + d.input_tokens + " in / " + d.output_tokens + " out tokens)";
  else if (ev.kind === "tool_started") text = d.tool + "(" + d.arguments + ")";
  else if (ev.kind === "tool_finished") text = d.tool + (d.is_error ? " error: " : " ok: ") + (d.context ? "[" + d.context + "] " : "") + d.result;
  else if (ev.kind === "approval_requested") text = "approval #" + d.approval + " requested for " + d.amount + " EUR";
  else if (ev.kind === "refused_by_desk") text = "call " + d.call_id + " refused by the desk: " + d.reason;
  else if (ev.kind === "dropped_by_desk") text = "call " + d.call_id + " dropped by the desk: " + d.reason;
  else if (ev.kind === "decision") text = (d.approved ? "approved" : "denied") + " by staff " + (d.reason || "");
  else if (ev.kind === "run_finished") text = "outcome " + d.outcome + " (" + d.reason + ")";
  else text = JSON.stringify(d);
  li.appendChild(document.createTextNode(" " + text));
  return li;
}

function follow(list) {
  const id = list.id.replace("trace-", "");
  const progress = document.getElementById("progress-" + id);
  const source = new EventSource(list.dataset.stream);
  let turns = 0;
  source.addEventListener("trace", (message) => {
    const ev = JSON.parse(message.data);
    if (ev.kind === "model_request") turns = ev.data.turn;
    list.appendChild(row(ev));
    if (progress) progress.textContent = "running: turn " + turns + ", " + list.children.length + " event(s)";
  });
  source.addEventListener("end", (message) => {
    source.close();
    const end = JSON.parse(message.data);
    if (progress) progress.textContent = "finished: " + end.status;
    list.dataset.finished = end.status;
    const status = list.closest("details") && list.closest("details").querySelector(".run-status");
    if (status) status.textContent = end.status;
    // triage hands over to the next step: reload to follow the run it starts
    if (end.kind === "triage") setTimeout(() => window.location.reload(), 300);
  });
  source.onerror = () => { if (progress) progress.textContent = "reconnecting\u2026"; };
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("ol.trace[data-stream]").forEach(follow);
  // a ticket between two steps (waiting for the pipeline): look again in a moment
  if (document.querySelector("[data-reload-soon]")) setTimeout(() => window.location.reload(), 1000);
});
