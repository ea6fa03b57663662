/** Attributes of an element made by h(): a function is an event listener, a string an attribute. */
export type Attrs = Record<string, string | ((e: Event) => void)>;

/** An element with attributes and children; strings become text nodes (never HTML). */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Node | string | null)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === 'function') {
      el.addEventListener(k, v);
    } else {
      el.setAttribute(k, v);
    }
  }
  for (const child of children) {
    if (child !== null) {
      el.append(child);
    }
  }
  return el;
}

/** A table with a header row; `testId` is what the browser tests find it by. */
export function table(headers: string[], rows: (Node | string)[][], testId: string): HTMLElement {
  return h(
    'table',
    { 'data-testid': testId },
    h('thead', {}, h('tr', {}, ...headers.map((c) => h('th', {}, c)))),
    h('tbody', {}, ...rows.map((r) => h('tr', {}, ...r.map((c) => h('td', {}, c))))),
  );
}

/** Asks before an admin action: a modal with the action's description, Cancel and Confirm. */
export function confirmAction(message: string): Promise<boolean> {
  return new Promise((resolve) => {
    const dialog = h('dialog', { 'data-testid': 'confirm' });
    const close = (answer: boolean) => () => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      h('p', {}, message),
      h('button', { click: close(false) }, 'Cancel'),
      ' ',
      h('button', { class: 'danger', click: close(true) }, 'Confirm'),
    );
    document.body.append(dialog);
    dialog.showModal();
  });
}
