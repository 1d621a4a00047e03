// Building DOM nodes safely: text always goes in through textContent (trace strings are
// never parsed as HTML), attributes through setAttribute.

/**
 * el("td", {className: "num", title: fullName}, "text", childNode, ...) -> HTMLElement.
 * Props: className, dataset {...}, style {...}, on {event: handler}, any other key becomes an attribute
 * (skipped when null/undefined/false). Children: strings (as text), nodes, arrays, null.
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "className") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "style") Object.assign(node.style, v); // CSSOM: allowed under any CSP
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k === "text") node.textContent = String(v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else if (c instanceof Node) node.appendChild(c);
    else node.appendChild(document.createTextNode(String(c)));
  }
}

/** Replace all children of `node`. */
export function setChildren(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/**
 * A link only for http(s) URLs (a `javascript:` or `data:` URL from a payload must never
 * become clickable); otherwise the text alone.
 */
export function safeLink(href, text) {
  let url = null;
  try {
    url = new URL(String(href), window.location.href);
  } catch {
    url = null;
  }
  if (!url || (url.protocol !== "https:" && url.protocol !== "http:")) return el("span", {}, text);
  return el("a", { href: url.href, target: "_blank", rel: "noopener noreferrer" }, text);
}

/** A section with a heading: <section class="card"><h2>title</h2>...</section>. */
export function card(title, ...children) {
  return el("section", { className: "card" }, title ? el("h2", {}, title) : null, ...children);
}

/** A small "?" that shows `text` on hover and keyboard focus (CSS tooltip, plain text). */
export function helpIcon(text) {
  if (!text) return null;
  return el("span", { className: "help", tabindex: "0", role: "note", "aria-label": text,
    "data-tip": text }, "?");
}

/**
 * Text with line-break opportunities (<wbr>) after "::", ",", "(", "<" and "/" so long C++
 * names wrap between identifiers, never inside one ("aten::|convolution_backward", not
 * "convolution_|backward"). Built from text nodes: never parsed.
 */
export function breakable(text) {
  const frag = document.createDocumentFragment();
  for (const part of String(text).split(/(?<=::|[,(</])/)) {
    if (frag.childNodes.length) frag.appendChild(document.createElement("wbr"));
    frag.appendChild(document.createTextNode(part));
  }
  return frag;
}
