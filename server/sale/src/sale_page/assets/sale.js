// The sale page's behaviour, written after `const SALE = {...}` (the activity's settings)
// when a page is published. Plain script, no framework. The time that matters is the
// server's: the page keeps the server's time from /status, corrected by half the round
// trip, and moves it on with performance.now(), never with the visitor's clock. The button
// lights when the server says the sale is open: the button script (its `canStart`) or
// /status, whichever answered last.
(() => {
  'use strict';

  const $ = (id) => document.getElementById(id);
  const el = {
    phase: $('phase'), countdown: $('countdown'), buy: $('buy'), message: $('message'),
    challenge: $('challenge'), question: $('question'), answer: $('answer'), seats: $('seats'),
    order: $('order'), orderId: $('order-id'), orderStatus: $('order-status'), amount: $('order-amount'),
    pay: $('pay'), recheck: $('recheck'), lottery: $('lottery'), register: $('register'),
  };
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // How long one buy request may take before it is sent again (same X-Request-ID).
  const BUY_TIMEOUT_MS = 4000;
  const BUY_TRIES = 6;
  // A click blocks the button this long.
  const CLICK_BLOCK_MS = 10000;
  // Without UNPAID this long after the buy, the page says the order is being prepared.
  const PREPARING_PATIENCE_MS = 10000;

  // ---- the buyer: a token from the URL fragment (then kept) or from local storage ----
  const TOKEN_KEY = 'seckill.token';
  const fragment = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (fragment) {
    localStorage.setItem(TOKEN_KEY, decodeURIComponent(fragment[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  const token = localStorage.getItem(TOKEN_KEY);
  const buyer = (() => {
    try {
      const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      return String(JSON.parse(atob(part)).sub);
    } catch {
      return null;
    }
  })();
  // The click in progress (its request id, body, order), kept across reloads.
  const CLICK_KEY = `seckill.sale.${SALE.activity}.${buyer}`;
  const loadClick = () => {
    try {
      return JSON.parse(localStorage.getItem(CLICK_KEY));
    } catch {
      return null;
    }
  };
  const saveClick = (click) => localStorage.setItem(CLICK_KEY, JSON.stringify(click));
  const forgetClick = () => localStorage.removeItem(CLICK_KEY);

  // ---- the server's clock ----
  let clock = null; // {server, at, rtt}: the server's time at performance.now() === at
  const serverNow = () => (clock ? clock.server + (performance.now() - clock.at) : null);

  let status = null; // the last /status answer
  let statusAt = -Infinity; // performance.now() when it came
  let statusFailed = false;
  // /status answered 404: the page is published but the sale is not prepared (pre-warmed)
  // yet. The shop is reachable; the sale is just not open yet.
  let notPrepared = false;
  let button = null; // the last button script's state
  let buttonAt = -Infinity;
  let lastStatusAsk = -Infinity;
  let lastButtonAsk = -Infinity;
  let blockedUntil = 0; // performance.now() until which a click is blocked
  let sending = false;
  // The order a click made, while it is being prepared: the button waits for it. Once it is
  // ready to pay (or over) the button lights again for a new click, a new order.
  let following = null;
  let shown = null; // the order on display, which the pay button pays
  let challenge = null; // {challenge_id, question}
  let challengeDemanded = false; // a registration was refused CHALLENGE_FAILED

  async function syncStatus() {
    lastStatusAsk = performance.now();
    const sent = performance.now();
    try {
      const res = await fetch(`/api/activities/${SALE.activity}/status`, { cache: 'no-store' });
      notPrepared = res.status === 404;
      if (notPrepared) {
        statusFailed = false;
        render();
        return;
      }
      if (!res.ok) throw new Error(`status ${res.status}`);
      const body = await res.json();
      const got = performance.now();
      const rtt = got - sent;
      // A sample with a much longer round trip than the last one is a worse estimate.
      if (!clock || rtt <= clock.rtt * 3 || got - clock.at > 60000) {
        clock = { server: body.server_time_ms + rtt / 2, at: got, rtt };
      }
      status = body;
      // Answers are ordered by when they were asked: a slow one must not undo a newer one.
      statusAt = sent;
      statusFailed = false;
    } catch {
      statusFailed = true;
    }
    render();
  }

  async function syncButton() {
    lastButtonAsk = performance.now();
    const sent = lastButtonAsk;
    try {
      // no-cache: revalidated with If-None-Match, so an unchanged script costs a 304.
      const res = await fetch(SALE.button, { cache: 'no-cache' });
      if (!res.ok) throw new Error(`button ${res.status}`);
      const text = await res.text();
      const state = JSON.parse(text.slice(text.indexOf('(') + 1, text.lastIndexOf(')')));
      button = state;
      buttonAt = sent;
    } catch {
      // /status still tells the phase.
    }
    render();
  }

  // The phase by the server, from whichever source answered last; `closed` (an operator's
  // switch) only /status knows, so it holds until /status says otherwise. Until /status
  // answers once the page has no clock, no stock and no challenge setting: unknown.
  function phase() {
    if (!status) return notPrepared ? 'not-ready' : 'unknown';
    if (status.phase === 'closed') return 'closed';
    if (button && buttonAt > statusAt) return button.phase;
    return status.phase;
  }

  const selectedItem = () => {
    const chosen = document.querySelector('input[name=item]:checked');
    return chosen ? Number(chosen.value) : null;
  };
  const soldOut = () => {
    const item = selectedItem();
    return Boolean(status && status.items.some((i) => i.item_id === item && i.sold_out));
  };

  function two(n) {
    return String(n).padStart(2, '0');
  }
  function countdownText(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    const d = Math.floor(s / 86400);
    const clockText = `${two(Math.floor((s % 86400) / 3600))}:${two(Math.floor((s % 3600) / 60))}:${two(s % 60)}`;
    return d > 0 ? `${d} d ${clockText}` : clockText;
  }
  // Prices are in yuan: the sign goes with every amount the page writes.
  const money = (cents) => `¥${Math.trunc(cents / 100)}.${two(Math.abs(cents) % 100)}`;

  // A time in the buyer's zone, with UTC beside it (the page is rendered in UTC only).
  function zoned(ms) {
    const at = new Date(ms);
    const day = (y, m, d) => `${y}-${two(m + 1)}-${two(d)}`;
    const local = `${day(at.getFullYear(), at.getMonth(), at.getDate())} ${two(at.getHours())}:${two(at.getMinutes())}`;
    const utc = `${day(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate())} ${two(at.getUTCHours())}:${two(at.getUTCMinutes())}`;
    const east = -at.getTimezoneOffset();
    if (east === 0) return `${utc} UTC`;
    const zone = `UTC${east < 0 ? '-' : '+'}${Math.floor(Math.abs(east) / 60)}${Math.abs(east) % 60 ? `:${two(Math.abs(east) % 60)}` : ''}`;
    return `${local} ${zone} (${local.slice(0, 10) === utc.slice(0, 10) ? utc.slice(11) : utc} UTC)`;
  }
  for (const time of document.querySelectorAll('time[datetime]')) {
    time.textContent = zoned(Date.parse(time.getAttribute('datetime')));
  }

  function say(text, code) {
    el.message.textContent = text;
    el.message.dataset.code = code || '';
  }

  // ---- a lottery: registration, the draw's outcome, the buyer's code ----
  // A lottery's page sells to code holders only: the buy button lights only for a buyer
  // whose code for the chosen item is live by the server's clock, and the buy carries it.
  const lottery = SALE.mode === 'lottery';
  let mine = null; // item id -> the buyer's line of /registrations/me
  let lastMineAsk = -Infinity;
  let registering = false;

  async function syncMine() {
    if (!lottery || !token) return;
    lastMineAsk = performance.now();
    try {
      const res = await fetch(`/api/activities/${SALE.activity}/registrations/me`, {
        headers: { Authorization: `Bearer ${token}` },
        cache: 'no-store',
      });
      if (!res.ok) throw new Error(`registrations ${res.status}`);
      const lines = await res.json();
      mine = Object.fromEntries(lines.map((line) => [line.item_id, line]));
    } catch {
      // asked again at the next tick
    }
    render();
  }

  const myLine = () => (mine ? mine[selectedItem()] || null : null);
  function liveCode() {
    const line = myLine();
    const now = serverNow();
    if (!line || line.status !== 'won' || !line.code || now === null) return null;
    return now >= line.code_valid_from_ms && now <= line.code_expires_ms ? line : null;
  }
  function registrationOpen() {
    const now = serverNow();
    return now !== null && now >= SALE.registration_opens_at_ms && now < SALE.registration_closes_at_ms;
  }

  const OUTCOME_WORDS = {
    registered: () => `You are registered. The draw is at ${zoned(SALE.registration_closes_at_ms)}.`,
    won: (line) => `You won! Your code ${line.code} is valid until ${zoned(line.code_expires_ms)}.`,
    waitlisted: (line) => `You are number ${line.waitlist_position} on the waitlist: a unit a winner leaves comes to you.`
      + (line.waitlist_turns_passed ? ` ${line.waitlist_turns_passed} turn(s) have passed since the draw.` : ''),
    bought: () => 'You bought with your code.',
    expired: () => 'Your code expired unused.',
    lost: () => 'Not this time: neither the draw nor the waitlist reached you.',
    revoked: () => 'Your registration was revoked.',
  };

  function renderLottery() {
    if (!lottery) return;
    const line = myLine();
    const now = serverNow();
    el.register.hidden = Boolean(line) || (now !== null && now >= SALE.registration_closes_at_ms);
    el.register.disabled = !token || registering || !registrationOpen();
    if (line) {
      let text = OUTCOME_WORDS[line.status] ? OUTCOME_WORDS[line.status](line) : line.status;
      if (line.status === 'won' && now !== null) text += ` ${countdownText(line.code_expires_ms - now)} left.`;
      el.lottery.textContent = text;
      el.lottery.dataset.status = line.status;
    } else if (now !== null && now >= SALE.registration_closes_at_ms) {
      el.lottery.textContent = 'Registration has closed: the draw is for those who registered.';
      el.lottery.dataset.status = 'closed';
    }
  }

  // A registration carries the challenge's answer while the switch asks for one, as a buy
  // does; an answer is good once, so the next registration asks a new question.
  function registrationBody() {
    const body = { item_id: selectedItem() };
    if (((status && status.challenge_required) || challengeDemanded) && challenge) {
      body.challenge_id = challenge.challenge_id;
      body.answer = Number(el.answer.value);
      challenge = null;
    }
    return body;
  }

  // Whether the page asks the human challenge now: before a buy in an open sale, or before
  // a lottery registration while its window is open.
  function challengeWanted(p) {
    if (!token) return false;
    const required = status && status.challenge_required;
    if (required && p === 'open' && !following) return true;
    return (required || challengeDemanded) && lottery && !myLine() && registrationOpen();
  }

  if (lottery) {
    el.register.addEventListener('click', async () => {
      if (el.register.disabled) return;
      registering = true;
      render();
      try {
        const res = await fetch(`/api/activities/${SALE.activity}/registrations`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
          body: JSON.stringify(registrationBody()),
        });
        const body = await res.json().catch(() => null);
        if (res.ok) {
          say('', '');
        } else {
          const code = body && body.code;
          // The switch may have turned on since /status last said (or /status is not
          // served yet): the refusal itself says a question is wanted.
          if (code === 'CHALLENGE_FAILED') challengeDemanded = true;
          const words = WORDS[code];
          say(words ? words(Number(res.headers.get('Retry-After')) || 1) : `The registration was refused (${code || res.status}).`, code || String(res.status));
        }
      } catch {
        say('The shop could not be reached. Please try again.', 'NO_ANSWER');
      } finally {
        registering = false;
        syncMine();
      }
    });
  }

  // ---- what the page shows, from what it knows ----
  function render() {
    const now = serverNow();
    const p = phase();
    el.phase.dataset.phase = p;
    if (p === 'unknown') {
      el.phase.textContent = statusFailed
        ? 'Sale status unknown: the shop cannot be reached right now; the page keeps trying.'
        : 'Sale status unknown: asking the shop…';
    } else if (p === 'not-ready') {
      el.phase.textContent = 'The sale is not open yet: the shop is still preparing it. This page checks again by itself.';
    } else if (p === 'upcoming') {
      el.phase.textContent = 'The sale has not started yet.';
    } else if (p === 'open') {
      el.phase.textContent = soldOut() ? 'Sold out.' : 'The sale is open.';
    } else if (p === 'ended') {
      el.phase.textContent = 'The sale has ended.';
    } else if (p === 'closed') {
      el.phase.textContent = 'The sale is closed for now.';
    }
    if (now !== null && p === 'upcoming') {
      el.countdown.textContent = `Starts in ${countdownText(SALE.starts_at_ms - now)}`;
    } else if (now !== null && p === 'open') {
      el.countdown.textContent = `Ends in ${countdownText(SALE.ends_at_ms - now)}`;
    } else {
      el.countdown.textContent = '';
    }
    const wait = blockedUntil - performance.now();
    const buyable = lottery ? Boolean(liveCode()) : !soldOut();
    const lit = p === 'open' && buyable && !sending && wait <= 0 && !following && token;
    el.buy.disabled = !lit;
    el.buy.textContent = wait > 0 ? `Buy now (wait ${Math.ceil(wait / 1000)} s)` : 'Buy now';
    if (!token && p === 'open' && !soldOut()) say('Sign in to buy: this page has no buyer token.', 'NO_TOKEN');
    // The units left, as /status or the stream last said them.
    if (status) {
      for (const item of status.items) {
        const left = document.querySelector(`.item[data-item="${item.item_id}"] .left`);
        if (left && typeof item.units_left === 'number') left.textContent = item.sold_out ? 'sold out' : `${item.units_left} left`;
      }
    }
    renderLottery();
    const wantChallenge = challengeWanted(p);
    el.challenge.hidden = !wantChallenge;
    if (wantChallenge && !challenge) fetchChallenge();
  }

  // ---- the challenge ----
  let askingChallenge = false;
  async function fetchChallenge() {
    if (askingChallenge || !token) return;
    askingChallenge = true;
    try {
      const res = await fetch(`/api/challenge?activity_id=${SALE.activity}`, {
        headers: { Authorization: `Bearer ${token}` },
        cache: 'no-store',
      });
      if (res.ok) {
        challenge = await res.json();
        el.question.textContent = challenge.question;
        el.answer.value = '';
      }
    } catch {
      // asked again at the next render
    } finally {
      askingChallenge = false;
    }
  }

  // ---- a click: one request id, kept for every retry of that click ----
  function newRequestId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function clickBody() {
    const body = { activity_id: SALE.activity };
    if (SALE.kind === 'seated') {
      body.seats = (el.seats ? el.seats.value : '').split(/[\s,]+/).filter(Boolean);
    } else {
      body.item_id = selectedItem();
      body.quantity = 1;
    }
    const code = lottery ? liveCode() : null;
    if (code) body.code = code.code;
    if (status && status.challenge_required && challenge) {
      body.challenge_id = challenge.challenge_id;
      body.answer = Number(el.answer.value);
    }
    return body;
  }

  el.buy.addEventListener('click', () => {
    if (el.buy.disabled || sending) return;
    // A click whose answer never came is the same click again: same id, same body.
    const pending = loadClick();
    const click = pending && !pending.orderId ? pending : {
      requestId: newRequestId(),
      path: SALE.kind === 'seated' ? '/api/seckill/seats' : '/api/seckill/buy',
      body: clickBody(),
    };
    saveClick(click);
    blockedUntil = performance.now() + CLICK_BLOCK_MS;
    send(click);
  });

  const WORDS = {
    SOLD_OUT: () => 'Sold out: every unit has been taken.',
    ALREADY_PURCHASED: () => 'You already hold as many as one buyer may.',
    LIMIT_EXCEEDED: () => 'That many would take you past the limit per buyer.',
    RATE_LIMITED: (retry) => `Too many tries at once. Please wait ${retry} s and try again.`,
    ACTIVITY_NOT_STARTED: () => 'The sale has not started yet.',
    ACTIVITY_ENDED: () => 'The sale has ended.',
    ACTIVITY_CLOSED: () => 'The sale is closed for now.',
    CHALLENGE_FAILED: () => 'The answer was not accepted. Here is a new question.',
    ITEM_NOT_FOUND: () => 'This is not on sale (or that seat does not exist).',
    UNAUTHENTICATED: () => 'Please sign in again: your session has expired.',
    BAD_REQUEST: () => 'The shop could not read that request.',
    OVERLOADED: () => 'The shop is very busy. Please try again in a moment.',
    DEGRADED: () => 'The shop is having trouble. Please try again in a moment.',
    NOT_QUALIFIED: () => 'This sale is by lottery: only a winner\'s code buys here.',
    CODE_EXPIRED: () => 'Your code expired: its unit went to the next on the waitlist.',
    REGISTRATION_CLOSED: () => 'Registration is not open now.',
    REGISTRATION_REVOKED: () => 'Your registration was revoked.',
  };

  async function send(click) {
    sending = true;
    render();
    say('Sending your order…', 'SENDING');
    try {
      for (let tries = 1; ; tries++) {
        let res;
        let body = null;
        const abort = new AbortController();
        const timer = setTimeout(() => abort.abort(), BUY_TIMEOUT_MS);
        try {
          res = await fetch(click.path, {
            method: 'POST',
            headers: {
              'Content-Type': 'application/json',
              Authorization: `Bearer ${token}`,
              'X-Request-ID': click.requestId,
            },
            body: JSON.stringify(click.body),
            signal: abort.signal,
          });
          body = await res.json().catch(() => null);
        } catch {
          res = null;
        } finally {
          clearTimeout(timer);
        }
        const code = body && body.code;
        if (!res || code === 'REQUEST_IN_PROGRESS') {
          if (tries >= BUY_TRIES) {
            say('The shop did not answer. Press the button again to retry the same order.', 'NO_ANSWER');
            return;
          }
          say('The network is slow; trying the same order again…', 'RETRYING');
          await sleep(500 * tries);
          continue;
        }
        if (res.ok && body && body.order_id) {
          click.orderId = body.order_id;
          saveClick(click);
          say('', '');
          follow(click.orderId, true);
          return;
        }
        forgetClick();
        const retry = Number(res.headers.get('Retry-After')) || 1;
        if (code === 'RATE_LIMITED') blockedUntil = Math.max(blockedUntil, performance.now() + retry * 1000);
        if (code === 'CHALLENGE_FAILED') challenge = null;
        const words = WORDS[code];
        say(words ? words(retry) : `The order was refused (${code || res.status}).`, code || String(res.status));
        return;
      }
    } finally {
      sending = false;
      render();
    }
  }

  // ---- the buyer's events (`events.js`), pushed instead of polled ----
  const events = buyerEvents(`/api/events?activity_id=${SALE.activity}`, token);
  const { stream, pushedStates } = events;
  const onStream = events.on;
  const streamChange = events.change;

  // The units left as the sale moves them, pushed while the stream is open (the page
  // reads /status every 20 s all the same, and only that without a stream).
  onStream('units', (units) => {
    if (!status || !Array.isArray(units.items)) return;
    for (const item of units.items) {
      const known = status.items.find((i) => i.item_id === item.item_id);
      if (known) Object.assign(known, { sold_out: item.sold_out, units_left: item.units_left });
    }
    render();
  });

  // A lottery's status pushed (the draw, a code from the waitlist, a revocation, the end):
  // the buyer's whole line (his code, his place) is read at once. A stream that opens tells
  // nothing of what happened before it did, so the line is read again then too.
  if (lottery) {
    onStream('registration', () => syncMine());
    (async () => {
      let opened = 0;
      for (;;) {
        await streamChange();
        if (stream.opens !== opened) {
          opened = stream.opens;
          syncMine();
        }
      }
    })();
  }

  // ---- the order: preparing, then pay, then paid ----
  const ORDER_WORDS = {
    PAID: 'Paid. Thank you!',
    FAILED: 'We could not complete this order; the unit went back on sale.',
    CANCELLED: 'This order was cancelled: it was not paid in time.',
    REFUND_PENDING: 'The payment came after the order was cancelled; it is being refunded.',
  };

  function showOrder(orderId, text, state) {
    el.order.hidden = false;
    el.order.dataset.order = orderId;
    el.order.dataset.status = state;
    el.orderId.textContent = `Order ${orderId}`;
    el.orderStatus.textContent = text;
  }

  async function readOrder(orderId) {
    try {
      const res = await fetch(`/api/orders/${orderId}`, {
        headers: { Authorization: `Bearer ${token}` },
        cache: 'no-store',
      });
      return res.ok ? await res.json() : null;
    } catch {
      return null;
    }
  }

  let recheckNow = null;
  el.recheck.addEventListener('click', (event) => {
    event.preventDefault();
    if (recheckNow) recheckNow();
  });

  // The order is ready to pay or over: the click is done, and a new click may buy again.
  function settled() {
    following = null;
    syncMine();
    // The units left have moved by this order: ask now rather than at the next 20 s sync.
    syncStatus();
    render();
  }

  // `fresh`: the order a click has just made, whose every change the open stream brings; an
  // order the page comes back to (a reload) may have changed while it was away: read once.
  async function follow(orderId, fresh) {
    following = orderId;
    shown = orderId;
    el.pay.hidden = true;
    el.pay.disabled = false;
    el.amount.textContent = '';
    render();
    const since = performance.now();
    showOrder(orderId, 'Got it! Preparing your payment…', 'PREPARING');
    let ask = !fresh;
    let opensSeen = stream.opens;
    for (;;) {
      if (stream.opens !== opensSeen) {
        ask = true;
        opensSeen = stream.opens;
      }
      const pushed = pushedStates.get(orderId);
      // Ready to pay is pushed without the amount and the time to pay by: read them.
      const read = ask || !stream.open || pushed === 'UNPAID' ? await readOrder(orderId) : null;
      ask = false;
      const state = read ? read.status : pushed && pushed !== 'UNPAID' ? pushed : 'PRE_CREATED';
      if (state === 'UNPAID') {
        el.recheck.hidden = true;
        showOrder(orderId, 'Your order is ready to pay.', 'UNPAID');
        el.amount.textContent = read.pay_deadline_ms
          ? `Amount: ${money(read.amount_cents)} · pay by ${zoned(read.pay_deadline_ms)}`
          : `Amount: ${money(read.amount_cents)}`;
        el.pay.hidden = false;
        settled();
        if (read.pay_deadline_ms) watchDeadline(orderId, read.pay_deadline_ms);
        return;
      }
      if (ORDER_WORDS[state]) {
        el.recheck.hidden = true;
        el.pay.hidden = true;
        showOrder(orderId, ORDER_WORDS[state], state);
        settled();
        return;
      }
      const waited = performance.now() - since;
      if (waited >= PREPARING_PATIENCE_MS) {
        showOrder(orderId, 'Your order is being prepared. Nothing is lost: you can check again in a moment.', 'PRE_CREATED');
        el.recheck.hidden = false;
      }
      // With the stream open: its next event, its drop, or the end of the patience. Without
      // it: every 1.5 s at first, then calmer. "Check again" asks at once.
      const patience = Math.max(PREPARING_PATIENCE_MS - waited, 0);
      const pause = waited >= PREPARING_PATIENCE_MS ? 5000 : 1500;
      const next = stream.open && pushed !== 'UNPAID'
        ? streamChange(waited < PREPARING_PATIENCE_MS ? patience : undefined)
        : sleep(pause);
      await Promise.race([next, new Promise((resolve) => {
        recheckNow = () => {
          ask = true;
          resolve();
        };
      })]);
    }
  }

  // An unpaid order on display is read again once its time to pay is over, by the server's
  // clock: the shop cancels it then and gives its unit back, so the buyer sees it cancelled
  // rather than a pay button that no longer works, and may try again.
  const FINAL = ['PAID', 'CANCELLED', 'FAILED', 'REFUND_PENDING'];
  async function watchDeadline(orderId, deadlineMs) {
    for (;;) {
      const now = serverNow();
      await sleep(now === null ? 2000 : Math.min(Math.max(deadlineMs - now, 0) + 1000, 30000));
      if (shown !== orderId || FINAL.includes(el.order.dataset.status)) return;
      const later = serverNow();
      if (later === null || later < deadlineMs || el.order.dataset.status === 'PAYING') continue;
      const order = await readOrder(orderId);
      if (shown !== orderId || !order || !FINAL.includes(order.status)) continue;
      if (FINAL.includes(el.order.dataset.status)) return;
      ended(orderId, order.status);
      return;
    }
  }

  // The unpaid order on display is over (cancelled, or paid elsewhere).
  function ended(orderId, state) {
    el.pay.hidden = true;
    el.amount.textContent = '';
    showOrder(orderId, ORDER_WORDS[state], state);
    // A refusal at the limit no longer holds once this order gave its unit back.
    if (['ALREADY_PURCHASED', 'LIMIT_EXCEEDED'].includes(el.message.dataset.code)) say('', '');
    settled();
  }

  // Pushed: said at once, without waiting for the deadline's read.
  onStream('order', (event) => {
    if (event.order_id === shown && el.order.dataset.status === 'UNPAID' && FINAL.includes(event.status)) {
      ended(event.order_id, event.status);
    }
  });

  el.pay.addEventListener('click', async () => {
    const orderId = shown;
    if (!orderId) return;
    el.pay.disabled = true;
    showOrder(orderId, 'Starting the payment…', 'PAYING');
    try {
      const res = await fetch(`/api/orders/${orderId}/pay`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}` },
      });
      const body = await res.json().catch(() => null);
      if (!res.ok) {
        const refused = {
          ORDER_NOT_PAYABLE: 'This order cannot be paid any more.',
          PAY_DEADLINE_PASSED: 'The time to pay this order has passed.',
        };
        showOrder(orderId, refused[body && body.code] || 'The payment could not start. Please try again.', 'UNPAID');
        el.pay.disabled = false;
        return;
      }
      el.pay.hidden = true;
      showOrder(orderId, 'Paying… waiting for the payment center.', 'PAYING');
      let opensSeen = stream.opens;
      for (;;) {
        const pushed = pushedStates.get(orderId);
        const reopened = stream.opens !== opensSeen;
        opensSeen = stream.opens;
        const order = pushed && pushed !== 'UNPAID' ? { status: pushed }
          : stream.open && !reopened ? null : await readOrder(orderId);
        if (order && order.status !== 'UNPAID') {
          showOrder(orderId, ORDER_WORDS[order.status] || order.status, order.status);
          return;
        }
        await (stream.open ? streamChange() : sleep(1500));
      }
    } catch {
      showOrder(orderId, 'The payment could not start. Please try again.', 'UNPAID');
      el.pay.disabled = false;
    }
  });

  // ---- the loop: countdown every quarter second, the server asked as the start nears ----
  function tick() {
    const now = serverNow();
    const untilStart = now === null ? null : SALE.starts_at_ms - now;
    const sinceStatus = performance.now() - lastStatusAsk;
    const sinceButton = performance.now() - lastButtonAsk;
    const p = phase();
    const nearStart = untilStart !== null && untilStart < 2000 && p === 'upcoming';
    // Re-sync the clock every 20 s; every second around the start, and while unreachable.
    // Every 5 s while the sale is not prepared: it opens only after a pre-warm.
    const statusEvery = nearStart || statusFailed || p === 'unknown' ? 1000 : p === 'not-ready' ? 5000 : 20000;
    if (sinceStatus >= statusEvery) syncStatus();
    // The button script: every 5 s, every quarter second once the start is due.
    const buttonEvery = nearStart ? 250 : 5000;
    if (sinceButton >= buttonEvery) syncButton();
    // A lottery's outcome: pushed while the stream is open (read every 30 s all the same),
    // else every 2 s (a code can come from the waitlist at any moment).
    if (lottery && performance.now() - lastMineAsk >= (stream.open ? 30000 : 2000)) syncMine();
    render();
  }

  const resumed = loadClick();
  syncStatus();
  syncButton();
  syncMine();
  events.open();
  if (resumed && resumed.orderId) {
    follow(resumed.orderId);
  } else if (resumed && token) {
    // Reloaded while a click was waiting for its answer: ask again with the same id.
    blockedUntil = performance.now() + CLICK_BLOCK_MS;
    send(resumed);
  }
  setInterval(tick, 250);
})();
