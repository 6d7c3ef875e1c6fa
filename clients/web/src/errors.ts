// Errors as values: the `extensions.code` every engage error carries, typed by the schema's
// `ErrorCode` enum, wherever Apollo Client put the error (a GraphQL error in a result, an
// HTTP 4xx whose body is a GraphQL response, or an error over the WebSocket).
import { CombinedGraphQLErrors, CombinedProtocolErrors, ServerError } from '@apollo/client/errors';
import { ErrorCode } from './gql/graphql';

export { ErrorCode };

const known = new Set<string>(Object.values(ErrorCode));

/**
 * The code of an error's first GraphQL error; undefined for a network failure, or a code
 * this build does not know (a newer server's: regenerate the kit).
 */
export function errorCode(error: unknown): ErrorCode | undefined {
  const code = firstErrors(error)?.[0]?.extensions?.code;
  return typeof code === 'string' && known.has(code) ? (code as ErrorCode) : undefined;
}

/** The seconds a RATE_LIMITED answer asks to wait (`extensions.retryAfter`), if it says. */
export function retryAfterSeconds(error: unknown): number | undefined {
  const extensions = firstErrors(error)?.[0]?.extensions;
  const seconds = extensions?.code === ErrorCode.RateLimited ? extensions.retryAfter : undefined;
  return typeof seconds === 'number' && seconds >= 0 ? seconds : undefined;
}

type WithExtensions = ReadonlyArray<{ extensions?: Record<string, unknown> }>;

function firstErrors(error: unknown): WithExtensions | undefined {
  if (CombinedGraphQLErrors.is(error) || CombinedProtocolErrors.is(error)) return error.errors;
  if (ServerError.is(error)) {
    try {
      return (JSON.parse(error.bodyText) as { errors?: WithExtensions }).errors;
    } catch {
      return undefined;
    }
  }
  return undefined;
}
