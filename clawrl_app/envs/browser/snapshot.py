"""The page as text with refs (ENVS.md §5.7 D): an in-page script (ours, never the model's)
lists the visible interactive and text elements in document order, one line each, and
gives each a ref (`e1`, `e2`, ...) kept in a `data-clawrl-ref` attribute:

    [e1] heading "Sign up" level=1
    [e3] textbox "Email" value=""
    [e5] combobox "Plan" selected="Free" options="Free|Pro|Team"
    [e6] checkbox "I accept the terms" checked=false
    [e7] button "Register"

A ref stays with its element for the life of the document (a re-rendered element gets a
new one; a new page starts again at e1), so the same actions on the same page give the same
refs: the oracle's rehearsal relies on it. Every line starts with `[e`, so page text can
never forge the header lines (`url:`, `changes:`) the env writes around it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

REF_ATTR = "data-clawrl-ref"
MAX_LINES = 250
MAX_TEXT = 100  # characters of one name or value

SNAPSHOT_JS = r"""
(opts) => {
  const ATTR = opts.attr, MAXT = opts.maxText;
  const clip = (s) => { s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > MAXT ? s.slice(0, MAXT - 1) + '…' : s; };
  const q = (s) => JSON.stringify(clip(s));
  const CONTROL = 'input,select,textarea,button';
  const ownText = (el) => {  // text of el without the text of form controls inside it
    let out = '';
    for (const n of el.childNodes) {
      if (n.nodeType === 3) out += n.textContent + ' ';
      else if (n.nodeType === 1 && !n.matches(CONTROL + ',option,script,style'))
        out += ownText(n) + ' ';
    }
    return out;
  };
  const directText = (el) => {  // only el's own text nodes: a wrapper is not a text block
    let out = '';
    for (const n of el.childNodes) if (n.nodeType === 3) out += n.textContent;
    return out.trim();
  };
  const visible = (el) => {
    if (el.checkVisibility && !el.checkVisibility({visibilityProperty: true})) return false;
    return el.getClientRects().length > 0;
  };
  const ROLES = ['button', 'link', 'checkbox', 'switch', 'radio', 'tab', 'menuitem',
                 'textbox', 'combobox', 'slider'];
  const roleOf = (el) => {
    const tag = el.tagName.toLowerCase(), r = el.getAttribute('role');
    if (tag === 'input') {
      const t = (el.getAttribute('type') || 'text').toLowerCase();
      if (t === 'hidden' || t === 'file') return null;
      if (['button', 'submit', 'reset', 'image'].includes(t)) return 'button';
      if (t === 'checkbox') return r === 'switch' ? 'switch' : 'checkbox';
      if (t === 'radio') return 'radio';
      if (t === 'range') return 'slider';
      return 'textbox';
    }
    if (r && ROLES.includes(r)) return r;
    if (tag === 'a' && el.hasAttribute('href')) return 'link';
    if (tag === 'button' || tag === 'summary') return 'button';
    if (tag === 'select') return 'combobox';
    if (tag === 'textarea') return 'textbox';
    if (el.getAttribute('contenteditable') === 'true') return 'textbox';
    if (/^h[1-6]$/.test(tag)) return 'heading';
    if (tag === 'tr') return 'row';
    if (tag === 'img') return el.getAttribute('alt') ? 'img' : null;
    return null;
  };
  const nameOf = (el, role) => {
    const al = el.getAttribute('aria-label');
    if (al) return al;
    const lb = el.getAttribute('aria-labelledby');
    if (lb) return lb.split(/\s+/).map((id) => {
      const t = document.getElementById(id); return t ? t.innerText : ''; }).join(' ');
    if (el.labels && el.labels.length) return Array.from(el.labels).map(ownText).join(' ');
    if (role === 'row') return Array.from(el.cells).map((c) => clip(c.innerText)).join(' | ');
    if (role === 'img') return el.getAttribute('alt');
    if (el.tagName === 'INPUT' && role === 'button') return el.value || el.type;
    if (['textbox', 'combobox', 'checkbox', 'switch', 'radio', 'slider'].includes(role))
      return el.getAttribute('placeholder') || el.getAttribute('title') || el.name || '';
    return el.innerText || el.getAttribute('title') || '';
  };
  const stateOf = (el, role) => {
    const parts = [];
    if (role === 'heading') parts.push('level=' + el.tagName[1]);
    if (role === 'tab') parts.push('selected=' + (el.getAttribute('aria-selected') === 'true'));
    if (role === 'link') {
      const href = el.getAttribute('href') || '';
      let shown = href;
      try { const u = new URL(href, location.href);
            if (u.origin === location.origin) shown = u.pathname + u.search + u.hash; }
      catch (e) {}
      parts.push('href=' + q(shown));
    }
    if (role === 'textbox' || role === 'slider') {
      const v = el.isContentEditable && !('value' in el) ? el.innerText : el.value;
      parts.push('value=' + (el.type === 'password' ? q('•'.repeat(v.length)) : q(v)));
    }
    if (role === 'combobox' && el.options) {
      const sel = el.selectedOptions[0];
      parts.push('selected=' + q(sel ? sel.label : ''));
      parts.push('options=' + q(Array.from(el.options).map((o) => o.label).join('|')));
    }
    if (['checkbox', 'switch', 'radio'].includes(role)) {
      const c = 'checked' in el && el.tagName === 'INPUT' ? el.checked
        : el.getAttribute('aria-checked') === 'true';
      parts.push('checked=' + c);
    }
    if (el.disabled || el.getAttribute('aria-disabled') === 'true') parts.push('disabled');
    return parts.length ? ' ' + parts.join(' ') : '';
  };
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'OPTION', 'LABEL',
                        'OPTGROUP', 'TITLE', 'HEAD']);
  const INTERACTIVE_ROLES = new Set(ROLES);
  const INSIDE_CONTROL = 'label,button,a[href],select,summary,[role=button],[role=link],' +
    '[role=tab],[role=menuitem],[role=switch],[role=checkbox]';
  let next = window.__clawrlNextRef || 1;
  const lines = [];
  let omitted = 0, block = null;
  for (const el of document.body ? document.body.querySelectorAll('*') : []) {
    if (SKIP.has(el.tagName)) continue;
    let role = roleOf(el);
    const interactive = role !== null && INTERACTIVE_ROLES.has(role);
    if (!interactive && block && block.contains(el)) continue;  // text already shown
    if (!visible(el)) continue;
    let name;
    if (role === null) {
      if (el.closest(INSIDE_CONTROL)) continue;
      if (!directText(el)) continue;
      name = el.innerText;  // the whole block, inline markup included
      role = el.tagName === 'LI' ? 'listitem' : 'text';
    } else {
      name = nameOf(el, role);
    }
    if (!interactive) block = el;
    if (lines.length >= opts.maxLines) { omitted++; continue; }
    let ref = el.getAttribute(ATTR);
    if (!ref) { ref = 'e' + next++; el.setAttribute(ATTR, ref); }
    lines.push('[' + ref + '] ' + role + ' ' + q(name) + stateOf(el, role));
  }
  window.__clawrlNextRef = next;
  return {url: location.pathname + location.search + location.hash, title: document.title,
          lines: lines, omitted: omitted,
          scroll: [Math.round(window.scrollY), document.documentElement.scrollHeight]};
}
"""


@dataclass(frozen=True)
class Snapshot:
    """The page at one moment: its site path, title and element lines."""

    url: str
    title: str
    lines: tuple[str, ...]
    omitted: int = 0

    @property
    def text(self) -> str:
        """The element lines, with a note when some were left out."""
        more = [f"[... {self.omitted} more elements not shown]"] if self.omitted else []
        return "\n".join(list(self.lines) + more)

    @property
    def digest(self) -> str:
        """A hash of what the policy sees (the step judge's "page unchanged" test)."""
        return hashlib.sha1("\n".join((self.url, self.title, self.text)).encode()).hexdigest()


def take_snapshot(page: Any, max_lines: int = MAX_LINES) -> Snapshot:
    """Run the snapshot script in `page` (a Playwright sync Page) and return its result."""
    raw = page.evaluate(SNAPSHOT_JS, {"attr": REF_ATTR, "maxText": MAX_TEXT, "maxLines": max_lines})
    return Snapshot(str(raw["url"]), str(raw["title"]), tuple(raw["lines"]), int(raw["omitted"]))


def diff_lines(old: Snapshot | None, new: Snapshot, limit: int = 12) -> list[str]:
    """`+ line` / `- line` for the element lines that appeared or went away (at most
    `limit` of each, then a count); empty when nothing changed."""
    if old is None:
        return []
    before, after = set(old.lines), set(new.lines)
    added = [f"+ {x}" for x in new.lines if x not in before]
    removed = [f"- {x}" for x in old.lines if x not in after]
    out: list[str] = []
    for group in (removed, added):
        out += group[:limit]
        if len(group) > limit:
            out.append(f"  ... and {len(group) - limit} more")
    return out
