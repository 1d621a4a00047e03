// Fetching timeline windows as the user zooms and pans: requests are debounced (a wheel
// gesture sends one request, not fifty), a newer window aborts the request in flight, and
// an answer that arrives for a superseded window is dropped. Meanwhile the view keeps
// drawing the previous answer, scaled to the new window.

/**
 * createLoader({fetch(win, signal) -> Promise<answer>, onAnswer(answer, win), onError(err, win),
 * onBusy(bool), delay, maxWait}) -> {request(win), now(win), cancel(), busy()}.
 * `win` is any object with `key` (windows with equal keys are not fetched twice in a row).
 * A request waits for `delay` ms of calm, but never more than `maxWait` ms after the first
 * request of a burst (a long drag still refreshes what it uncovers).
 */
export function createLoader({ fetch, onAnswer, onError, onBusy, delay = 150, maxWait = 500 }) {
  let timer = null;
  let burstStart = null; // when the first request not yet fetched came in
  let controller = null;
  let seq = 0;
  let lastKey = null; // key of the window last fetched or being fetched
  let inFlight = false;

  function setBusy(value) {
    if (inFlight !== value) {
      inFlight = value;
      onBusy?.(value);
    }
  }

  function start(win) {
    clearTimeout(timer);
    timer = null;
    burstStart = null;
    if (win.key === lastKey) return;
    controller?.abort();
    controller = new AbortController();
    lastKey = win.key;
    const mine = ++seq;
    setBusy(true);
    fetch(win, controller.signal).then((answer) => {
      if (mine !== seq) return;
      setBusy(false);
      onAnswer(answer, win);
    }, (err) => {
      if (mine !== seq) return;
      setBusy(false);
      lastKey = null; // the same window may be asked for again
      if (err?.name !== "AbortError") onError?.(err, win);
    });
  }

  return {
    /** Fetch `win` once the user pauses for `delay` ms (or `maxWait` ms into a burst). */
    request(win) {
      clearTimeout(timer);
      const now = Date.now();
      if (burstStart === null) burstStart = now;
      timer = setTimeout(() => start(win), Math.max(0, Math.min(delay, burstStart + maxWait - now)));
    },
    /** Fetch `win` at once. */
    now: start,
    /** Forget pending and in-flight requests (the view is going away). */
    cancel() {
      clearTimeout(timer);
      timer = null;
      burstStart = null;
      seq += 1;
      controller?.abort();
      setBusy(false);
    },
    busy: () => inFlight || timer !== null,
  };
}
