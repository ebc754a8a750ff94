import { test } from "node:test";
import assert from "node:assert/strict";

import { formatTask, parseTask, parseTaskList, toCreatePayload } from "../src/client.js";

test("parseTaskList reads an API response", () => {
  const tasks = parseTaskList('[{"id": 1, "title": "Write docs", "done": false}, {"id": 2, "title": "Ship", "done": true}]');
  assert.equal(tasks.length, 2);
  assert.equal(tasks[0].title, "Write docs");
  assert.equal(tasks[1].done, true);
});

test("parseTask rejects malformed tasks", () => {
  assert.throws(() => parseTask({ id: "1", title: "x" }), TypeError);
  assert.throws(() => parseTask({ id: 1, title: "  " }), TypeError);
  assert.throws(() => parseTaskList('{"id": 1}'), TypeError);
});

test("formatTask shows the done box, id and title", () => {
  assert.equal(formatTask(parseTask({ id: 3, title: "Write docs", done: true })), "[x] #3 Write docs");
  assert.equal(formatTask(parseTask({ id: 4, title: "Review" })), "[ ] #4 Review");
});

test("toCreatePayload trims the title", () => {
  assert.equal(JSON.parse(toCreatePayload("  Plan sprint ")).title, "Plan sprint");
  assert.throws(() => toCreatePayload(" "), TypeError);
});
