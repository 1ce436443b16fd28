// Types of stickyd's page client, served at /_stickyd/client.d.ts. The
// client itself is /_stickyd/client.js (a script: window.stickyd) or
// /_stickyd/client.mjs (an ES module exporting the same):
//
//   import { page } from "/_stickyd/client.mjs";
//   const grid = page({ kind: "grid", onChange: render });
//   const answer = await grid.send({ op: "filter", text: "abc" });

/** Where the page's connection is. */
export type Status = "connecting" | "live" | "offline" | "polling" | "unauthorized" | "failed";

/** A JSON value, as the page's tree holds it. */
export type JSON = null | boolean | number | string | JSON[] | { [key: string]: JSON };

/** One change to the tree, in sequence order. */
export interface Delta {
  seq: number;
  op: "set" | "delete" | "reset";
  /** Slash-separated ("rows/3/name"); empty for the whole tree. */
  path?: string;
  value?: JSON;
  /** On a reset: why the page restarted (shown through onNotice). */
  notice?: string;
}

export interface PageOptions {
  /** The page kind, sent when the page opens (default "page"). */
  kind?: string;
  /** The page's id (default: kept in sessionStorage per kind, so a reload resumes it). */
  id?: string;
  /** After deltas were applied to page.tree. */
  onChange?: (tree: { [key: string]: JSON }, deltas: Delta[]) => void;
  /** Something the person should know: the page was restored or restarted clean, or lost its connection. */
  onNotice?: (text: string) => void;
  onStatus?: (status: Status) => void;
  /** "poll": the long-poll fallback from the start, no WebSocket. */
  transport?: "poll";
}

/** A refusal of a message: code names it; retry says it did not run. */
export interface PageError extends Error {
  code?: "bad_request" | "no_connection" | "too_large" | "timeout" | "unavailable" | "maintenance" | "rate_limited" | "internal" | string;
  retry?: boolean;
}

export interface Page {
  readonly id: string;
  readonly kind: string;
  /** The page's data tree, kept equal to the worker's. */
  readonly tree: { [key: string]: JSON };
  /** The sequence of the last delta applied. */
  readonly last: number;
  /** The worker holding the page now. */
  readonly worker: string;
  readonly status: Status;
  /**
   * Sends a message to the page's worker and resolves with the app's
   * answer. It runs once: sent again after a lost answer, it is answered
   * from the worker's memory. Rejects with a PageError.
   */
  send(data: JSON): Promise<JSON>;
  /** Stops the page's connection. */
  close(): void;
}

export function page(opts?: PageOptions): Page;

declare global {
  interface Window {
    stickyd: { page: typeof page };
  }
}
