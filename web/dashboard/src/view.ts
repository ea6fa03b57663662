/** The views, in the order of the navigation. */
export const VIEW_NAMES = ['Fleet', 'Queues', 'Traffic', 'Usage', 'Tasks', 'Admin', 'Audit'] as const;

/** A view's name: its navigation button, heading and `view-<name>` test id. */
export type ViewName = (typeof VIEW_NAMES)[number];

/** What the shell gives a view when it renders it (plain functions: views destructure them). */
export interface ViewContext {
  /** Puts the view's content under its heading (replacing what the last render put there). */
  fill: (...nodes: Node[]) => void;
  /** Renders the current view again (after a filter changed or an action was done). */
  refresh: () => Promise<void>;
}

/** One view of the page. */
export interface View {
  name: ViewName;
  /** Its data changes by itself: the shell renders it again every few seconds while it is shown. */
  live: boolean;
  /** Fetches the view's data and fills it; a rejection is shown in the view (or signs out on 401). */
  render(ctx: ViewContext): Promise<void>;
}
