// Types of stickyd's page client, served at /_stickyd/client.d.ts. The
// client itself is /_stickyd/client.js (a script: window.stickyd) or
// /_stickyd/client.mjs (an ES module exporting the same):
//
//   import { page, html } from "/_stickyd/client.mjs";
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

/**
 * A refusal of a message. code names it: the front's (docs/protocol.md,
 * "Refusals"), the client's own ("too_large": over the front's
 * max_message_bytes, never sent; "gave_up": sent 11 times without an
 * answer, it may have run; "closed": page.close() came first; "bad_request":
 * not JSON), or the app's ("refused" unless the app said another, as the Go
 * SDK's worker.Refusal does; "state_too_large": a write past the page's
 * bound). retry: the front's refusals set it when the message did not run;
 * the app's when it says the same request may succeed later. A rejected
 * message is never sent again by the client.
 */
export interface PageError extends Error {
  code?: "bad_request" | "no_connection" | "too_large" | "timeout" | "unavailable" | "maintenance" | "rate_limited" | "internal"
    | "gave_up" | "closed" | "refused" | "state_too_large" | string;
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
   * What the page uses now: "websocket", or "poll" (the long-poll fallback,
   * asked for or fallen back to after refused connects; from the latter the
   * page tries the WebSocket again in the background, backing off to 15 s,
   * and goes back to it once it opens).
   */
  readonly transport: "websocket" | "poll";
  /**
   * Sends a message to the page's worker and resolves with the app's
   * answer. It runs once: sent again after a lost answer, it is answered
   * from the worker's memory. Rejects with a PageError: at once for a
   * message over the front's limit (too_large), after at most 10 resends
   * (gave_up), or with the app's refusal.
   */
  send(data: JSON): Promise<JSON>;
  /** Stops the page's connection. */
  close(): void;
  /**
   * Draws the value at path into el with render, now and whenever a delta
   * touches it (a write at, under or above path). render returns a string
   * (el's text, never parsed as HTML), a Node (el's content), or nothing
   * (it drew el itself). Returns a function that unbinds.
   */
  bind(el: Element, path: string, render: (value: JSON | undefined, el: Element) => string | Node | void): () => void;
  /**
   * Keeps one child of el per entry of the map (or list) at path, drawn by
   * item and marked data-key: a delta under one entry draws that entry
   * again; one at or above path draws every entry. Returns a function that
   * unbinds.
   */
  bindList(el: Element, path: string, item: (value: JSON, key: string) => Node | string,
    opts?: {
      /** Orders the children, over [key, value] pairs (default: by key). */
      order?: (a: [string, JSON], b: [string, JSON]) => number;
      /** Shown while there is no entry. */
      empty?: Node | string;
    }): () => void;
}

export function page(opts?: PageOptions): Page;

/**
 * Builds DOM from markup whose interpolations are text, never markup:
 * html`<li class="${cls}">${title}</li>` returns the element (a fragment
 * for several). A Node, or an array of them, may be interpolated as
 * content. Quote attribute values; an on* attribute takes no
 * interpolation (it throws), and a URL attribute that would run script is
 * dropped.
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Node;

declare global {
  interface Window {
    stickyd: { page: typeof page; html: typeof html };
  }
}
