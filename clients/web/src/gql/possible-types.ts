
      export type PossibleTypesResultData = {
  "possibleTypes": {
    "Node": [
      "Board",
      "Item",
      "Job",
      "Notification",
      "Order",
      "Remark",
      "Season",
      "Topic",
      "User",
      "Voucher"
    ]
  }
};
      const result: PossibleTypesResultData = {
  "possibleTypes": {
    "Node": [
      "Board",
      "Item",
      "Job",
      "Notification",
      "Order",
      "Remark",
      "Season",
      "Topic",
      "User",
      "Voucher"
    ]
  }
};
      export default result;
    