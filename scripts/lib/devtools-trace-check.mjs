// A second, independent parser of a Chrome trace-event file: the trace
// engine of Chrome DevTools' Performance panel (npm @paulirish/trace_engine).
// Prints one line per thread it built ("thread PID TID NAME: N entries"),
// then "devtools: N processes, N threads, N entries"; exits 1 if the engine
// throws or builds no thread.
//
//   NODE_PATH=DIR/node_modules node scripts/lib/devtools-trace-check.mjs FILE
//
// tests/e2e.sh timeline installs the package into the cache on first use.
import fs from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const path = require.resolve('@paulirish/trace_engine', { paths: (process.env.NODE_PATH || '').split(':') });
const Trace = await import(path);
// The engine reads DOMRect, which Node lacks (its README's advice).
globalThis.DOMRect = class {
  constructor(x = 0, y = 0, width = 0, height = 0) {
    Object.assign(this, { x, y, width, height });
  }
};
const file = process.argv[2];
const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(doc.traceEvents ?? doc, { metadata: {} });
const parsed = model.parsedTrace(0);
const data = parsed.data ?? parsed;
let threads = 0, entries = 0;
for (const [pid, p] of data.Renderer.processes) {
  for (const [tid, t] of p.threads) {
    threads++;
    entries += t.entries.length;
    console.log(`thread ${pid} ${tid} ${t.name}: ${t.entries.length} entries`);
  }
}
console.log(`devtools: ${data.Renderer.processes.size} processes, ${threads} threads, ${entries} entries`);
process.exit(threads > 0 ? 0 : 1);
