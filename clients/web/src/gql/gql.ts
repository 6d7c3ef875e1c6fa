/* eslint-disable */
import * as types from './graphql';
import type { TypedDocumentNode as DocumentNode } from '@graphql-typed-document-node/core';

/**
 * Map of all GraphQL operations in the project.
 *
 * This map has several performance disadvantages:
 * 1. It is not tree-shakeable, so it will include all operations in the project.
 * 2. It is not minifiable, so the string of a GraphQL query will be multiple times inside the bundle.
 * 3. It does not support dead code elimination, so it will add unused operations.
 *
 * Therefore it is highly recommended to use the babel or swc plugin for production.
 * Learn more about it here: https://the-guild.dev/graphql/codegen/plugins/presets/preset-client#reducing-bundle-size
 */
type Documents = {
    "fragment RemarkCard on Remark {\n  id\n  content\n  score\n  createdAt\n  likeCount\n  likedByMe\n  author {\n    id\n    name\n  }\n}\n\nfragment CalendarMonth on SignCalendar {\n  month\n  days\n  signedToday\n  streak\n  signedDays\n  makeUpsLeft\n  madeUpDays\n}\n\nfragment BoardEntry on RankEntry {\n  rank\n  points\n  user {\n    id\n    name\n  }\n}\n\nquery Viewer {\n  viewer {\n    id\n    name\n  }\n}\n\nquery ErrorCodes {\n  errorCodes\n}\n\nquery ItemRemarks($itemId: ID!, $first: Int, $after: String) {\n  item(id: $itemId) {\n    id\n    name\n  }\n  remarks(itemId: $itemId, first: $first, after: $after) {\n    edges {\n      cursor\n      node {\n        ...RemarkCard\n      }\n    }\n    pageInfo {\n      hasNextPage\n      endCursor\n    }\n  }\n}\n\nmutation LikeRemark($remarkId: ID!) {\n  likeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nmutation UnlikeRemark($remarkId: ID!) {\n  unlikeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nsubscription LikeCountChanged($remarkIds: [ID!]!) {\n  likeCountChanged(remarkIds: $remarkIds) {\n    remarkId\n    likeCount\n  }\n}\n\nquery SignCalendar($month: String) {\n  signCalendar(month: $month) {\n    ...CalendarMonth\n  }\n}\n\nmutation SignIn {\n  signIn {\n    date\n    streak\n    pointsAwarded\n    alreadySigned\n  }\n}\n\nsubscription LeaderboardChanged($top: Int) {\n  leaderboardChanged(top: $top) {\n    season {\n      id\n      name\n    }\n    entries {\n      ...BoardEntry\n    }\n  }\n}": typeof types.RemarkCardFragmentDoc,
};
const documents: Documents = {
    "fragment RemarkCard on Remark {\n  id\n  content\n  score\n  createdAt\n  likeCount\n  likedByMe\n  author {\n    id\n    name\n  }\n}\n\nfragment CalendarMonth on SignCalendar {\n  month\n  days\n  signedToday\n  streak\n  signedDays\n  makeUpsLeft\n  madeUpDays\n}\n\nfragment BoardEntry on RankEntry {\n  rank\n  points\n  user {\n    id\n    name\n  }\n}\n\nquery Viewer {\n  viewer {\n    id\n    name\n  }\n}\n\nquery ErrorCodes {\n  errorCodes\n}\n\nquery ItemRemarks($itemId: ID!, $first: Int, $after: String) {\n  item(id: $itemId) {\n    id\n    name\n  }\n  remarks(itemId: $itemId, first: $first, after: $after) {\n    edges {\n      cursor\n      node {\n        ...RemarkCard\n      }\n    }\n    pageInfo {\n      hasNextPage\n      endCursor\n    }\n  }\n}\n\nmutation LikeRemark($remarkId: ID!) {\n  likeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nmutation UnlikeRemark($remarkId: ID!) {\n  unlikeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nsubscription LikeCountChanged($remarkIds: [ID!]!) {\n  likeCountChanged(remarkIds: $remarkIds) {\n    remarkId\n    likeCount\n  }\n}\n\nquery SignCalendar($month: String) {\n  signCalendar(month: $month) {\n    ...CalendarMonth\n  }\n}\n\nmutation SignIn {\n  signIn {\n    date\n    streak\n    pointsAwarded\n    alreadySigned\n  }\n}\n\nsubscription LeaderboardChanged($top: Int) {\n  leaderboardChanged(top: $top) {\n    season {\n      id\n      name\n    }\n    entries {\n      ...BoardEntry\n    }\n  }\n}": types.RemarkCardFragmentDoc,
};

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 *
 *
 * @example
 * ```ts
 * const query = graphql(`query GetUser($id: ID!) { user(id: $id) { name } }`);
 * ```
 *
 * The query argument is unknown!
 * Please regenerate the types.
 */
export function graphql(source: string): unknown;

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "fragment RemarkCard on Remark {\n  id\n  content\n  score\n  createdAt\n  likeCount\n  likedByMe\n  author {\n    id\n    name\n  }\n}\n\nfragment CalendarMonth on SignCalendar {\n  month\n  days\n  signedToday\n  streak\n  signedDays\n  makeUpsLeft\n  madeUpDays\n}\n\nfragment BoardEntry on RankEntry {\n  rank\n  points\n  user {\n    id\n    name\n  }\n}\n\nquery Viewer {\n  viewer {\n    id\n    name\n  }\n}\n\nquery ErrorCodes {\n  errorCodes\n}\n\nquery ItemRemarks($itemId: ID!, $first: Int, $after: String) {\n  item(id: $itemId) {\n    id\n    name\n  }\n  remarks(itemId: $itemId, first: $first, after: $after) {\n    edges {\n      cursor\n      node {\n        ...RemarkCard\n      }\n    }\n    pageInfo {\n      hasNextPage\n      endCursor\n    }\n  }\n}\n\nmutation LikeRemark($remarkId: ID!) {\n  likeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nmutation UnlikeRemark($remarkId: ID!) {\n  unlikeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nsubscription LikeCountChanged($remarkIds: [ID!]!) {\n  likeCountChanged(remarkIds: $remarkIds) {\n    remarkId\n    likeCount\n  }\n}\n\nquery SignCalendar($month: String) {\n  signCalendar(month: $month) {\n    ...CalendarMonth\n  }\n}\n\nmutation SignIn {\n  signIn {\n    date\n    streak\n    pointsAwarded\n    alreadySigned\n  }\n}\n\nsubscription LeaderboardChanged($top: Int) {\n  leaderboardChanged(top: $top) {\n    season {\n      id\n      name\n    }\n    entries {\n      ...BoardEntry\n    }\n  }\n}"): (typeof documents)["fragment RemarkCard on Remark {\n  id\n  content\n  score\n  createdAt\n  likeCount\n  likedByMe\n  author {\n    id\n    name\n  }\n}\n\nfragment CalendarMonth on SignCalendar {\n  month\n  days\n  signedToday\n  streak\n  signedDays\n  makeUpsLeft\n  madeUpDays\n}\n\nfragment BoardEntry on RankEntry {\n  rank\n  points\n  user {\n    id\n    name\n  }\n}\n\nquery Viewer {\n  viewer {\n    id\n    name\n  }\n}\n\nquery ErrorCodes {\n  errorCodes\n}\n\nquery ItemRemarks($itemId: ID!, $first: Int, $after: String) {\n  item(id: $itemId) {\n    id\n    name\n  }\n  remarks(itemId: $itemId, first: $first, after: $after) {\n    edges {\n      cursor\n      node {\n        ...RemarkCard\n      }\n    }\n    pageInfo {\n      hasNextPage\n      endCursor\n    }\n  }\n}\n\nmutation LikeRemark($remarkId: ID!) {\n  likeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nmutation UnlikeRemark($remarkId: ID!) {\n  unlikeRemark(remarkId: $remarkId) {\n    remarkId\n    likeCount\n    liked\n    changed\n  }\n}\n\nsubscription LikeCountChanged($remarkIds: [ID!]!) {\n  likeCountChanged(remarkIds: $remarkIds) {\n    remarkId\n    likeCount\n  }\n}\n\nquery SignCalendar($month: String) {\n  signCalendar(month: $month) {\n    ...CalendarMonth\n  }\n}\n\nmutation SignIn {\n  signIn {\n    date\n    streak\n    pointsAwarded\n    alreadySigned\n  }\n}\n\nsubscription LeaderboardChanged($top: Int) {\n  leaderboardChanged(top: $top) {\n    season {\n      id\n      name\n    }\n    entries {\n      ...BoardEntry\n    }\n  }\n}"];

export function graphql(source: string) {
  return (documents as any)[source] ?? {};
}

export type DocumentType<TDocumentNode extends DocumentNode<any, any>> = TDocumentNode extends DocumentNode<  infer TType,  any>  ? TType  : never;