
      export type PossibleTypesResultData = {
  "possibleTypes": {
    "Node": [
      "Item",
      "Job",
      "Order",
      "Remark",
      "Season",
      "User",
      "Voucher"
    ]
  }
};
      const result: PossibleTypesResultData = {
  "possibleTypes": {
    "Node": [
      "Item",
      "Job",
      "Order",
      "Remark",
      "Season",
      "User",
      "Voucher"
    ]
  }
};
      export default result;
    