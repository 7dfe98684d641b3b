// The buyer's events (GET /api/events), pushed instead of polled: the stream client that the
// sale page's behaviour (`sale.js`, served right after this) opens with the buyer's token.
// Read with fetch, not EventSource, which cannot send the bearer token. While the stream is
// open, an order being prepared or paid waits for its events and is not polled; when the
// stream cannot be opened or drops, the page polls as it always did and opens the stream
// again a little later, resuming after the last event it read (Last-Event-ID), so nothing
// pushed in between is missed. A stream the server replaced (the same buyer opened one in
// another tab) is not opened again: two tabs would take it from each other for ever.
const buyerEvents = (url, token) => {
  'use strict';

  const RETRY_MS = 5000;
  // `opens` counts the openings: a stream that opens (again) tells nothing of what happened
  // before its start, so whoever follows an order reads it once then.
  const stream = { open: false, opens: 0, lastId: null, replaced: false };
  const handlers = {}; // event name → handlers of its data
  const pushedStates = new Map(); // order id → the latest state pushed
  let waiters = []; // woken by any event, and when the stream opens or drops
  const on = (name, handler) => (handlers[name] = handlers[name] || []).push(handler);
  // Resolves at the stream's next event, opening or drop, or after `ms` when given.
  const change = (ms) => new Promise((resolve) => {
    waiters.push(resolve);
    if (ms !== undefined) setTimeout(resolve, ms);
  });
  function wake() {
    const woken = waiters;
    waiters = [];
    for (const resolve of woken) resolve();
  }

  // One frame of the stream (its lines without the blank one that ended it).
  function frame(lines) {
    let name = 'message';
    let id = null;
    const data = [];
    for (const line of lines) {
      if (line.startsWith(':')) continue; // a comment: `open`, `heartbeat`
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') name = value;
      else if (field === 'data') data.push(value);
      else if (field === 'id') id = value;
    }
    if (id) stream.lastId = id;
    if (name === 'replaced') {
      stream.replaced = true;
      return;
    }
    if (!data.length) return;
    let body;
    try {
      body = JSON.parse(data.join('\n'));
    } catch {
      return;
    }
    if (name === 'order' && body.order_id) pushedStates.set(body.order_id, body.status);
    for (const handler of handlers[name] || []) handler(body);
    wake();
  }

  async function open() {
    if (!token || stream.replaced) return;
    const headers = { Authorization: `Bearer ${token}` };
    if (stream.lastId) headers['Last-Event-ID'] = stream.lastId;
    try {
      const res = await fetch(url, { headers, cache: 'no-store' });
      if (!res.ok || !res.body) throw new Error(`events ${res.status}`);
      stream.open = true;
      stream.opens += 1;
      wake();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      while (!stream.replaced) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, '\n');
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          frame(buffer.slice(0, end).split('\n'));
          buffer = buffer.slice(end + 2);
        }
      }
      if (stream.replaced) reader.cancel().catch(() => {});
    } catch {
      // Not opened, or dropped: the page polls meanwhile.
    }
    stream.open = false;
    wake();
    if (!stream.replaced) setTimeout(open, RETRY_MS);
  }

  return { stream, pushedStates, on, change, open };
};
