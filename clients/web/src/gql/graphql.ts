/* eslint-disable */
/** Internal type. DO NOT USE DIRECTLY. */
type Exact<T extends { [key: string]: unknown }> = { [K in keyof T]: T[K] };
/** Internal type. DO NOT USE DIRECTLY. */
export type Incremental<T> = T | { [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never };
import type { TypedDocumentNode as DocumentNode } from '@graphql-typed-document-node/core';
/** What a day of a calendar was for the user, in the user's time zone. */
export const DayState = {
  /** Before the user's first sign-in. */
  BeforeJoining: 'BEFORE_JOINING',
  /** Missed, and kept by a streak freeze. */
  Frozen: 'FROZEN',
  /** After today; also today while it is not signed yet. */
  Future: 'FUTURE',
  /** Repaired later (`repairDay`, or the deprecated `makeUpSignIn`). */
  MadeUp: 'MADE_UP',
  Missed: 'MISSED',
  /** Signed on the day. */
  Signed: 'SIGNED'
} as const;

export type DayState = typeof DayState[keyof typeof DayState];
/**
 * Every code engage answers in an error's `extensions.code`, so that clients can generate a
 * type for it and branch on it (`Query.errorCodes` lists them).
 */
export const ErrorCode = {
  /** `seckillVoucher`: the caller already has an order for this voucher (one per buyer). */
  AlreadyOrdered: 'ALREADY_ORDERED',
  /**
   * Before execution: the HTTP request or WebSocket message itself is malformed (no
   * query, a bad body, a deadline header out of range).
   */
  BadRequest: 'BAD_REQUEST',
  /**
   * An argument is invalid (out of range, misspelled, a date outside what is allowed);
   * the message says which. Do not retry unchanged.
   */
  BadUserInput: 'BAD_USER_INPUT',
  /** `joinBoard`: the board has all the entries its `maxEntries` allows. */
  BoardFull: 'BOARD_FULL',
  /**
   * Scheduling a job whose `callbackUrl` names a host that is not on
   * `ENGAGE_CALLBACK_HOSTS`.
   */
  CallbackHostNotAllowed: 'CALLBACK_HOST_NOT_ALLOWED',
  /**
   * The thing is in a state that refuses the change: an order already paid, cancelled or
   * expired (for anything but paying an expired one, see `PAY_WINDOW_OVER`), an item the
   * caller already reviewed.
   */
  Conflict: 'CONFLICT',
  /**
   * Before execution: a document that is not in the trusted manifest, where only trusted
   * ones run.
   */
  DocumentNotTrusted: 'DOCUMENT_NOT_TRUSTED',
  /**
   * `seckillVoucher`: the sale has ended; `submitScore`, `joinBoard`: the board's window
   * (`endsAt`) has closed.
   */
  Ended: 'ENDED',
  /**
   * Signed in, but without the role a field needs (admin or service fields); also
   * introspection on a server that has it turned off.
   */
  Forbidden: 'FORBIDDEN',
  /** Before execution: the document is not valid GraphQL syntax (no `data`). */
  GraphqlParseFailed: 'GRAPHQL_PARSE_FAILED',
  /**
   * Before execution: the document does not fit the schema or the limits of depth,
   * complexity and size (no `data`).
   */
  GraphqlValidationFailed: 'GRAPHQL_VALIDATION_FAILED',
  /**
   * `spendPoints`: the balance is short of the amount; nothing was spent, and the
   * idempotency key stays free for a later try.
   */
  InsufficientPoints: 'INSUFFICIENT_POINTS',
  /** A fault of the server; carries `extensions.requestId` to find it in the logs. */
  Internal: 'INTERNAL',
  /** Scheduling a job whose id is pending already. */
  JobExists: 'JOB_EXISTS',
  /**
   * `repairDay`, `makeUpSignIn`: no repairs left this month (`ENGAGE_REPAIRS_PER_MONTH`,
   * `ENGAGE_MAKEUP_PER_MONTH` a month); a new allowance starts on the first of next month.
   */
  MakeupLimit: 'MAKEUP_LIMIT',
  /** No such thing for this caller: an item, voucher, order, remark, user or dead job. */
  NotFound: 'NOT_FOUND',
  /**
   * `submitScore`: the board requires joining and the user has not joined it
   * (`joinBoard`).
   */
  NotJoined: 'NOT_JOINED',
  /**
   * `seckillVoucher`: the sale has not started yet; `submitScore`: the board's window
   * (`startsAt`) has not opened.
   */
  NotStarted: 'NOT_STARTED',
  /**
   * Scheduling a job with no `callbackUrl` on a topic that has no handler: nothing
   * could run it.
   */
  NoJobHandler: 'NO_JOB_HANDLER',
  /**
   * `payOrder`: the order's pay-by time has passed; it is expired and its stock given
   * back. The buyer may order again while the sale lasts.
   */
  PayWindowOver: 'PAY_WINDOW_OVER',
  /**
   * Before execution: an Automatic Persisted Query hash this server does not hold; send
   * the query text with it.
   */
  PersistedQueryNotFound: 'PERSISTED_QUERY_NOT_FOUND',
  /**
   * Too many requests: retry after `extensions.retryAfter` seconds (HTTP 429 with
   * `Retry-After`). Without `retryAfter`, too many at once (connections from one address,
   * WebSockets of one user, operations or subscriptions on one socket): retry once one
   * ends.
   */
  RateLimited: 'RATE_LIMITED',
  /**
   * `seckillVoucher`: the voucher has no stock left (a cancelled or expired order may give
   * one back).
   */
  SoldOut: 'SOLD_OUT',
  /**
   * No valid token where one is needed: none sent for a field that needs a viewer, or one
   * that is malformed, expired or signed by a key this server does not trust (that refuses
   * the whole request, HTTP 401). Sign in again.
   */
  Unauthenticated: 'UNAUTHENTICATED',
  /** Redis or SQL did not answer in time: retry later. Carries `extensions.requestId`. */
  Unavailable: 'UNAVAILABLE'
} as const;

export type ErrorCode = typeof ErrorCode[keyof typeof ErrorCode];
export type RemarkCardFragment = { __typename: 'Remark', id: string, content: string, score: number, createdAt: string, likeCount: number, likedByMe: boolean, author: { __typename: 'User', id: string, name: string } };

export type CalendarMonthFragment = { __typename: 'MonthCalendar', month: string, days: Array<DayState>, signedDays: number };

export type StreakFieldsFragment = { __typename: 'StreakStatus', current: number, signedToday: boolean, today: string, makeUpsLeft: number };

export type BoardEntryFragment = { __typename: 'RankEntry', rank: number, points: number, user: { __typename: 'User', id: string, name: string } };

export type ViewerQueryVariables = Exact<{ [key: string]: never; }>;


export type ViewerQuery = { __typename: 'Query', viewer: { __typename: 'User', id: string, name: string } | null };

export type ErrorCodesQueryVariables = Exact<{ [key: string]: never; }>;


export type ErrorCodesQuery = { __typename: 'Query', errorCodes: Array<ErrorCode> };

export type ItemRemarksQueryVariables = Exact<{
  itemId: string | number;
  first?: number | null | undefined;
  after?: string | null | undefined;
}>;


export type ItemRemarksQuery = { __typename: 'Query', item: { __typename: 'Item', id: string, name: string } | null, remarks: { __typename: 'RemarkConnection', edges: Array<{ __typename: 'RemarkEdge', cursor: string, node: { __typename: 'Remark', id: string, content: string, score: number, createdAt: string, likeCount: number, likedByMe: boolean, author: { __typename: 'User', id: string, name: string } } }>, pageInfo: { __typename: 'PageInfo', hasNextPage: boolean, endCursor: string | null } } };

export type RemarkByIdQueryVariables = Exact<{
  id: string | number;
}>;


export type RemarkByIdQuery = { __typename: 'Query', node:
    | { __typename: 'Board', id: string }
    | { __typename: 'Item', id: string }
    | { __typename: 'Job', id: string }
    | { __typename: 'Notification', id: string }
    | { __typename: 'Order', id: string }
    | { __typename: 'Remark', id: string, content: string, score: number, createdAt: string, likeCount: number, likedByMe: boolean, author: { __typename: 'User', id: string, name: string } }
    | { __typename: 'Season', id: string }
    | { __typename: 'Topic', id: string }
    | { __typename: 'User', id: string }
    | { __typename: 'Voucher', id: string }
   | null };

export type LikeRemarkMutationVariables = Exact<{
  remarkId: string | number;
}>;


export type LikeRemarkMutation = { __typename: 'Mutation', likeRemark: { __typename: 'LikeResult', changed: boolean, remark: { __typename: 'Remark', id: string, likeCount: number, likedByMe: boolean } } };

export type UnlikeRemarkMutationVariables = Exact<{
  remarkId: string | number;
}>;


export type UnlikeRemarkMutation = { __typename: 'Mutation', unlikeRemark: { __typename: 'LikeResult', changed: boolean, remark: { __typename: 'Remark', id: string, likeCount: number, likedByMe: boolean } } };

export type LikeCountChangedSubscriptionVariables = Exact<{
  remarkIds: Array<string | number> | string | number;
}>;


export type LikeCountChangedSubscription = { likeCountChanged: { __typename: 'LikeCount', remarkId: string, likeCount: number } };

export type CalendarQueryVariables = Exact<{
  month?: string | null | undefined;
}>;


export type CalendarQuery = { __typename: 'Query', calendar: { __typename: 'MonthCalendar', month: string, days: Array<DayState>, signedDays: number }, streak: { __typename: 'StreakStatus', current: number, signedToday: boolean, today: string, makeUpsLeft: number } };

export type SignInMutationVariables = Exact<{ [key: string]: never; }>;


export type SignInMutation = { __typename: 'Mutation', signIn: { __typename: 'SignInResult', date: string, pointsAwarded: number, alreadySigned: boolean, month: { __typename: 'MonthCalendar', month: string, days: Array<DayState>, signedDays: number }, status: { __typename: 'StreakStatus', current: number, signedToday: boolean, today: string, makeUpsLeft: number } } };

export type LeaderboardChangedSubscriptionVariables = Exact<{
  top?: number | null | undefined;
}>;


export type LeaderboardChangedSubscription = { leaderboardChanged: { __typename: 'LeaderboardSnapshot', season: { __typename: 'Season', id: string, name: string }, entries: Array<{ __typename: 'RankEntry', rank: number, points: number, user: { __typename: 'User', id: string, name: string } }> } };

export type MyRankChangedSubscriptionVariables = Exact<{ [key: string]: never; }>;


export type MyRankChangedSubscription = { myRankChanged: { __typename: 'RankEntry', rank: number, points: number, user: { __typename: 'User', id: string, name: string } } };

export const RemarkCardFragmentDoc = {"kind":"Document","definitions":[{"kind":"FragmentDefinition","name":{"kind":"Name","value":"RemarkCard"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"Remark"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"content"}},{"kind":"Field","name":{"kind":"Name","value":"score"}},{"kind":"Field","name":{"kind":"Name","value":"createdAt"}},{"kind":"Field","name":{"kind":"Name","value":"likeCount"}},{"kind":"Field","name":{"kind":"Name","value":"likedByMe"}},{"kind":"Field","name":{"kind":"Name","value":"author"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}}]}}]} as unknown as DocumentNode<RemarkCardFragment, unknown>;
export const CalendarMonthFragmentDoc = {"kind":"Document","definitions":[{"kind":"FragmentDefinition","name":{"kind":"Name","value":"CalendarMonth"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"MonthCalendar"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"month"}},{"kind":"Field","name":{"kind":"Name","value":"days"}},{"kind":"Field","name":{"kind":"Name","value":"signedDays"}}]}}]} as unknown as DocumentNode<CalendarMonthFragment, unknown>;
export const StreakFieldsFragmentDoc = {"kind":"Document","definitions":[{"kind":"FragmentDefinition","name":{"kind":"Name","value":"StreakFields"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"StreakStatus"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"current"}},{"kind":"Field","name":{"kind":"Name","value":"signedToday"}},{"kind":"Field","name":{"kind":"Name","value":"today"}},{"kind":"Field","name":{"kind":"Name","value":"makeUpsLeft"}}]}}]} as unknown as DocumentNode<StreakFieldsFragment, unknown>;
export const BoardEntryFragmentDoc = {"kind":"Document","definitions":[{"kind":"FragmentDefinition","name":{"kind":"Name","value":"BoardEntry"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"RankEntry"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"rank"}},{"kind":"Field","name":{"kind":"Name","value":"points"}},{"kind":"Field","name":{"kind":"Name","value":"user"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}}]}}]} as unknown as DocumentNode<BoardEntryFragment, unknown>;
export const ViewerDocument = {"__meta__":{"hash":"d2d9c0b1bdc0d585b5f1593f05300df8a92b899cd72cc37640e7092d3eb8e80a"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"query","name":{"kind":"Name","value":"Viewer"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"viewer"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}}]}}]} as unknown as DocumentNode<ViewerQuery, ViewerQueryVariables>;
export const ErrorCodesDocument = {"__meta__":{"hash":"a4ae871a54aa7e608b120306c85886091a2010d80683df4ac85c0ece15fbacc4"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"query","name":{"kind":"Name","value":"ErrorCodes"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"errorCodes"}}]}}]} as unknown as DocumentNode<ErrorCodesQuery, ErrorCodesQueryVariables>;
export const ItemRemarksDocument = {"__meta__":{"hash":"ef4a3122bb5b7fc6ab18d7f1bb16d28ed20c3f05e99d815e90b36eb7e984330d"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"query","name":{"kind":"Name","value":"ItemRemarks"},"variableDefinitions":[{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"itemId"}},"type":{"kind":"NonNullType","type":{"kind":"NamedType","name":{"kind":"Name","value":"ID"}}}},{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"first"}},"type":{"kind":"NamedType","name":{"kind":"Name","value":"Int"}}},{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"after"}},"type":{"kind":"NamedType","name":{"kind":"Name","value":"String"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"item"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"id"},"value":{"kind":"Variable","name":{"kind":"Name","value":"itemId"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}},{"kind":"Field","name":{"kind":"Name","value":"remarks"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"itemId"},"value":{"kind":"Variable","name":{"kind":"Name","value":"itemId"}}},{"kind":"Argument","name":{"kind":"Name","value":"first"},"value":{"kind":"Variable","name":{"kind":"Name","value":"first"}}},{"kind":"Argument","name":{"kind":"Name","value":"after"},"value":{"kind":"Variable","name":{"kind":"Name","value":"after"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"edges"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"cursor"}},{"kind":"Field","name":{"kind":"Name","value":"node"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"RemarkCard"}}]}}]}},{"kind":"Field","name":{"kind":"Name","value":"pageInfo"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"hasNextPage"}},{"kind":"Field","name":{"kind":"Name","value":"endCursor"}}]}}]}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"RemarkCard"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"Remark"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"content"}},{"kind":"Field","name":{"kind":"Name","value":"score"}},{"kind":"Field","name":{"kind":"Name","value":"createdAt"}},{"kind":"Field","name":{"kind":"Name","value":"likeCount"}},{"kind":"Field","name":{"kind":"Name","value":"likedByMe"}},{"kind":"Field","name":{"kind":"Name","value":"author"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}}]}}]} as unknown as DocumentNode<ItemRemarksQuery, ItemRemarksQueryVariables>;
export const RemarkByIdDocument = {"__meta__":{"hash":"102f49f1e03314411c1ff247ba34114df66b11c637aa8b72586aee7aa1421c78"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"query","name":{"kind":"Name","value":"RemarkById"},"variableDefinitions":[{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"id"}},"type":{"kind":"NonNullType","type":{"kind":"NamedType","name":{"kind":"Name","value":"ID"}}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"node"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"id"},"value":{"kind":"Variable","name":{"kind":"Name","value":"id"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"RemarkCard"}}]}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"RemarkCard"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"Remark"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"content"}},{"kind":"Field","name":{"kind":"Name","value":"score"}},{"kind":"Field","name":{"kind":"Name","value":"createdAt"}},{"kind":"Field","name":{"kind":"Name","value":"likeCount"}},{"kind":"Field","name":{"kind":"Name","value":"likedByMe"}},{"kind":"Field","name":{"kind":"Name","value":"author"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}}]}}]} as unknown as DocumentNode<RemarkByIdQuery, RemarkByIdQueryVariables>;
export const LikeRemarkDocument = {"__meta__":{"hash":"5e3f051572d2e296380ae049f9bbe6d0085ad281f46a8769dc6caa9ff7dbc1e9"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"mutation","name":{"kind":"Name","value":"LikeRemark"},"variableDefinitions":[{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"remarkId"}},"type":{"kind":"NonNullType","type":{"kind":"NamedType","name":{"kind":"Name","value":"ID"}}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"likeRemark"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"remarkId"},"value":{"kind":"Variable","name":{"kind":"Name","value":"remarkId"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"changed"}},{"kind":"Field","name":{"kind":"Name","value":"remark"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"likeCount"}},{"kind":"Field","name":{"kind":"Name","value":"likedByMe"}}]}}]}}]}}]} as unknown as DocumentNode<LikeRemarkMutation, LikeRemarkMutationVariables>;
export const UnlikeRemarkDocument = {"__meta__":{"hash":"79e9469f6e2960d8285885f2b12d427fa05ca612a5d06c5ebff5eb454035d7f8"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"mutation","name":{"kind":"Name","value":"UnlikeRemark"},"variableDefinitions":[{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"remarkId"}},"type":{"kind":"NonNullType","type":{"kind":"NamedType","name":{"kind":"Name","value":"ID"}}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"unlikeRemark"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"remarkId"},"value":{"kind":"Variable","name":{"kind":"Name","value":"remarkId"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"changed"}},{"kind":"Field","name":{"kind":"Name","value":"remark"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"likeCount"}},{"kind":"Field","name":{"kind":"Name","value":"likedByMe"}}]}}]}}]}}]} as unknown as DocumentNode<UnlikeRemarkMutation, UnlikeRemarkMutationVariables>;
export const LikeCountChangedDocument = {"__meta__":{"hash":"a1862907f301d4bdcaae654e47a191ecff03f7697797326a58a9554676e45d38"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"subscription","name":{"kind":"Name","value":"LikeCountChanged"},"variableDefinitions":[{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"remarkIds"}},"type":{"kind":"NonNullType","type":{"kind":"ListType","type":{"kind":"NonNullType","type":{"kind":"NamedType","name":{"kind":"Name","value":"ID"}}}}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"likeCountChanged"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"remarkIds"},"value":{"kind":"Variable","name":{"kind":"Name","value":"remarkIds"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"remarkId"}},{"kind":"Field","name":{"kind":"Name","value":"likeCount"}}]}}]}}]} as unknown as DocumentNode<LikeCountChangedSubscription, LikeCountChangedSubscriptionVariables>;
export const CalendarDocument = {"__meta__":{"hash":"b49458898e9692373f413c1b42a67c7f5ac4630a79800e9c8112d66fd717219a"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"query","name":{"kind":"Name","value":"Calendar"},"variableDefinitions":[{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"month"}},"type":{"kind":"NamedType","name":{"kind":"Name","value":"String"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"calendar"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"month"},"value":{"kind":"Variable","name":{"kind":"Name","value":"month"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"CalendarMonth"}}]}},{"kind":"Field","name":{"kind":"Name","value":"streak"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"StreakFields"}}]}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"CalendarMonth"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"MonthCalendar"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"month"}},{"kind":"Field","name":{"kind":"Name","value":"days"}},{"kind":"Field","name":{"kind":"Name","value":"signedDays"}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"StreakFields"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"StreakStatus"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"current"}},{"kind":"Field","name":{"kind":"Name","value":"signedToday"}},{"kind":"Field","name":{"kind":"Name","value":"today"}},{"kind":"Field","name":{"kind":"Name","value":"makeUpsLeft"}}]}}]} as unknown as DocumentNode<CalendarQuery, CalendarQueryVariables>;
export const SignInDocument = {"__meta__":{"hash":"953cbf67f22fd14afee37e1e885a75842ac66b48357e8698e1769925433c5a92"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"mutation","name":{"kind":"Name","value":"SignIn"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"signIn"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"date"}},{"kind":"Field","name":{"kind":"Name","value":"pointsAwarded"}},{"kind":"Field","name":{"kind":"Name","value":"alreadySigned"}},{"kind":"Field","name":{"kind":"Name","value":"month"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"CalendarMonth"}}]}},{"kind":"Field","name":{"kind":"Name","value":"status"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"StreakFields"}}]}}]}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"CalendarMonth"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"MonthCalendar"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"month"}},{"kind":"Field","name":{"kind":"Name","value":"days"}},{"kind":"Field","name":{"kind":"Name","value":"signedDays"}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"StreakFields"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"StreakStatus"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"current"}},{"kind":"Field","name":{"kind":"Name","value":"signedToday"}},{"kind":"Field","name":{"kind":"Name","value":"today"}},{"kind":"Field","name":{"kind":"Name","value":"makeUpsLeft"}}]}}]} as unknown as DocumentNode<SignInMutation, SignInMutationVariables>;
export const LeaderboardChangedDocument = {"__meta__":{"hash":"c940264eb9c86891a237559768357503dcc4a34c0b54c8bc77fdfd39613a6e28"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"subscription","name":{"kind":"Name","value":"LeaderboardChanged"},"variableDefinitions":[{"kind":"VariableDefinition","variable":{"kind":"Variable","name":{"kind":"Name","value":"top"}},"type":{"kind":"NamedType","name":{"kind":"Name","value":"Int"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"leaderboardChanged"},"arguments":[{"kind":"Argument","name":{"kind":"Name","value":"top"},"value":{"kind":"Variable","name":{"kind":"Name","value":"top"}}}],"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"season"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}},{"kind":"Field","name":{"kind":"Name","value":"entries"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"BoardEntry"}}]}}]}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"BoardEntry"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"RankEntry"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"rank"}},{"kind":"Field","name":{"kind":"Name","value":"points"}},{"kind":"Field","name":{"kind":"Name","value":"user"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}}]}}]} as unknown as DocumentNode<LeaderboardChangedSubscription, LeaderboardChangedSubscriptionVariables>;
export const MyRankChangedDocument = {"__meta__":{"hash":"228671087d4daf1a4c5a8ebd4be80a726562a133cddad7b4487f7fc1a94ca59a"},"kind":"Document","definitions":[{"kind":"OperationDefinition","operation":"subscription","name":{"kind":"Name","value":"MyRankChanged"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"myRankChanged"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"FragmentSpread","name":{"kind":"Name","value":"BoardEntry"}}]}}]}},{"kind":"FragmentDefinition","name":{"kind":"Name","value":"BoardEntry"},"typeCondition":{"kind":"NamedType","name":{"kind":"Name","value":"RankEntry"}},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"rank"}},{"kind":"Field","name":{"kind":"Name","value":"points"}},{"kind":"Field","name":{"kind":"Name","value":"user"},"selectionSet":{"kind":"SelectionSet","selections":[{"kind":"Field","name":{"kind":"Name","value":"__typename"}},{"kind":"Field","name":{"kind":"Name","value":"id"}},{"kind":"Field","name":{"kind":"Name","value":"name"}}]}}]}}]} as unknown as DocumentNode<MyRankChangedSubscription, MyRankChangedSubscriptionVariables>;