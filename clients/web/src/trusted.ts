// The trusted documents the kit was built with (`persisted-documents.json`, written by
// codegen): each operation is sent by its hash, and when text has to travel (the APQ
// fallback, WebSocket subscriptions) it is the manifest's exact text, so that its SHA-256 is
// the hash the service lists. Apollo's own printer would lay the same operation out
// differently, and a different text is a different document to a server that runs only
// trusted ones.
import { print } from '@apollo/client/utilities';
import type { ASTNode, DocumentNode } from 'graphql';
import manifest from '../persisted-documents.json';

const texts: Record<string, string> = manifest;

/** The manifest's hash of a generated document (codegen embeds it as `__meta__.hash`). */
export function trustedHash(document: DocumentNode): string | undefined {
  const hash = (document as { __meta__?: { hash?: unknown } }).__meta__?.hash;
  return typeof hash === 'string' && hash in texts ? hash : undefined;
}

/** The text to send for a document: the manifest's when it is listed there, else printed. */
export function documentText(
  node: ASTNode,
  originalPrint: (node: ASTNode) => string = print,
): string {
  const hash = node.kind === 'Document' ? trustedHash(node) : undefined;
  return hash ? texts[hash] : originalPrint(node);
}

/** SHA-256 hex of a text that is not in the manifest (an app's own operation), for APQ. */
export async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, '0')).join('');
}
