//! The schema's scalars on the wire: `DateTime` answered in UTC with milliseconds and `Z`
//! and taken with any offset, `Date` as a real `YYYY-MM-DD` day, `JSON` as a job's body in
//! and out; the sign calendar's `today`, only for the current month; `@specifiedBy` of each.

use chrono::{DateTime, Duration, FixedOffset, NaiveDate, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::harness::{first_code, next_data, subscribe, TestApp};

const CREATE_VOUCHER: &str =
    "mutation($input: CreateVoucherInput!) { createVoucher(input: $input) { id beginsAt endsAt } }";
const SCHEDULE: &str =
    "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { id data body runAt } }";
const MAKE_UP: &str = "mutation($d: Date!) { makeUpSignIn(date: $d) { date pointsAwarded } }";
const CALENDAR: &str =
    "query($m: String) { signCalendar(month: $m) { month signedDays makeUpsLeft \
     signedToday streak today { date signed streak } } }";

/// Whether a value is a `DateTime` as engage writes it: `YYYY-MM-DDThh:mm:ss.mmmZ`.
fn is_utc_with_millis(value: &Value) -> bool {
    let Some(text) = value.as_str() else {
        return false;
    };
    let shaped = text.len() == 24
        && text.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            19 => b == b'.',
            23 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    shaped && DateTime::parse_from_rfc3339(text).is_ok()
}

fn instant(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

fn voucher_input(item: &str, begins: &str, ends: &str) -> Value {
    json!({ "input": {
        "itemId": item, "title": "Deal", "stock": 5,
        "beginsAt": begins, "endsAt": ends, "payWithinSeconds": 900,
    } })
}

#[tokio::test]
async fn every_instant_is_answered_in_utc_with_milliseconds_and_z() {
    let app = TestApp::spawn_with(|config| config.timezone = chrono_tz::Asia::Shanghai).await;
    let admin = app.admin_token();
    let item = app
        .data(
            Some(&admin),
            "mutation { createItem(input: { name: \"Tea\" }) { createdAt } }",
            json!({}),
        )
        .await;
    let created = &item["createItem"]["createdAt"];
    assert!(is_utc_with_millis(created), "{created}");
    let gap = instant(created) - app.now();
    assert!(gap.num_seconds().abs() < 60, "{created} is not now");

    let seasons = app
        .data(None, "{ seasons { beginsAt endsAt } }", json!({}))
        .await;
    let season = &seasons["seasons"][0];
    assert!(is_utc_with_millis(&season["beginsAt"]), "{season}");
    assert!(is_utc_with_millis(&season["endsAt"]), "{season}");

    let mut socket = subscribe(&app, None, "subscription { serverTime(everySeconds: 60) }").await;
    let time = next_data(&mut socket).await;
    assert!(is_utc_with_millis(&time["serverTime"]), "{time}");
}

#[tokio::test]
async fn an_instant_with_an_offset_is_taken_and_answered_back_in_utc() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let item = app.create_item().await;
    let shanghai = FixedOffset::east_opt(8 * 3600).unwrap();
    // Six digits of fraction: any precision is taken, milliseconds are answered.
    let begins = app.now() - Duration::minutes(1);
    let ends = begins + Duration::hours(2);
    let sent = |at: DateTime<Utc>| {
        at.with_timezone(&shanghai)
            .to_rfc3339_opts(SecondsFormat::Micros, false)
    };
    assert!(sent(begins).ends_with("+08:00"));
    let voucher = app
        .data(
            Some(&admin),
            CREATE_VOUCHER,
            voucher_input(&item, &sent(begins), &sent(ends)),
        )
        .await["createVoucher"]
        .clone();
    for (field, at) in [("beginsAt", begins), ("endsAt", ends)] {
        assert!(is_utc_with_millis(&voucher[field]), "{voucher}");
        assert_eq!(
            instant(&voucher[field]).timestamp_millis(),
            at.timestamp_millis(),
            "{field} is the instant sent"
        );
    }

    // Read back, the same.
    let read = app
        .data(
            None,
            "query($id: ID!) { voucher(id: $id) { beginsAt endsAt } }",
            json!({ "id": voucher["id"] }),
        )
        .await;
    assert_eq!(read["voucher"]["beginsAt"], voucher["beginsAt"]);
    assert_eq!(read["voucher"]["endsAt"], voucher["endsAt"]);
}

#[tokio::test]
async fn a_time_without_an_offset_is_refused_with_bad_user_input() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let item = app.create_item().await;
    let ends = (app.now() + Duration::hours(1)).to_rfc3339();
    for begins in ["2026-11-27T03:04:05", "2026-11-27", "soon", ""] {
        let refused = app
            .gql(
                Some(&admin),
                CREATE_VOUCHER,
                voucher_input(&item, begins, &ends),
            )
            .await;
        assert_eq!(
            first_code(&refused),
            "BAD_USER_INPUT",
            "{begins}: {refused}"
        );
        let message = refused["errors"][0]["message"].as_str().unwrap();
        assert!(
            message.contains("DateTime") && message.contains("offset"),
            "{message}"
        );
    }
    // Written in the document rather than sent as a variable: refused alike.
    let literal = format!(
        r#"mutation {{ createVoucher(input: {{ itemId: "{item}", title: "Deal", stock: 5,
            beginsAt: "2026-11-27T03:04:05", endsAt: "{ends}", payWithinSeconds: 900 }}) {{ id }} }}"#
    );
    let refused = app.gql(Some(&admin), &literal, json!({})).await;
    assert_eq!(first_code(&refused), "BAD_USER_INPUT", "{refused}");
}

#[tokio::test]
async fn make_up_sign_in_takes_a_real_calendar_day() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4_101);
    let day = NaiveDate::from_ymd_opt(2026, 3, 10).unwrap();
    app.set_clock(day.and_hms_opt(10, 0, 0).unwrap().and_utc());
    let signed = app
        .data(Some(&token), "mutation { signIn { date } }", json!({}))
        .await;
    assert_eq!(signed["signIn"]["date"], "2026-03-10");

    let made_up = app
        .data(Some(&token), MAKE_UP, json!({ "d": "2026-03-07" }))
        .await;
    assert_eq!(
        made_up["makeUpSignIn"],
        json!({ "date": "2026-03-07", "pointsAwarded": 1 })
    );
    for refused in [
        "2026-02-30",
        "2026-03-32",
        "2026-3-8",
        "2026-03-08T00:00:00Z",
        "08/03/2026",
    ] {
        let body = app
            .gql(Some(&token), MAKE_UP, json!({ "d": refused }))
            .await;
        assert_eq!(first_code(&body), "BAD_USER_INPUT", "{refused}: {body}");
    }
    let literal = app
        .gql(
            Some(&token),
            "mutation { makeUpSignIn(date: \"2026-02-30\") { date } }",
            json!({}),
        )
        .await;
    assert_eq!(first_code(&literal), "BAD_USER_INPUT", "{literal}");
    let message = literal["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("YYYY-MM-DD"), "{message}");
}

#[tokio::test]
async fn a_jobs_body_goes_in_as_data_or_body_and_comes_out_as_data() {
    // Requests large enough to carry a body over the job's own limit.
    let app = TestApp::spawn_with(|config| config.max_body_bytes = 256 * 1024).await;
    let admin = app.admin_token();
    app.handle_topic("scalars");
    let schedule = |input: Value| {
        let mut input = input;
        input["topic"] = json!("scalars");
        input["delaySeconds"] = json!(600);
        json!({ "input": input })
    };
    let data = json!({ "zone": "Asia/Shanghai", "amounts": [1, 2.5, null], "ok": true });
    let from_data = app
        .data(
            Some(&admin),
            SCHEDULE,
            schedule(json!({ "id": "d1", "data": data })),
        )
        .await["scheduleJob"]
        .clone();
    assert_eq!(from_data["data"], data);
    assert!(is_utc_with_millis(&from_data["runAt"]), "{from_data}");
    // The deprecated text answers the same body.
    let text = from_data["body"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), data);

    let from_body = app
        .data(
            Some(&admin),
            SCHEDULE,
            schedule(json!({ "id": "b1", "body": "{\"user\": 7}" })),
        )
        .await["scheduleJob"]
        .clone();
    assert_eq!(from_body["data"], json!({ "user": 7 }));

    // Any JSON value, written in the document too; an object keeps the order of its keys.
    let literal = app
        .data(
            Some(&admin),
            r#"mutation { scheduleJob(input: { id: "l1", topic: "scalars", delaySeconds: 600,
                data: [1, "two", { zone: "UTC", amounts: [] }] }) { data body } }"#,
            json!({}),
        )
        .await;
    assert_eq!(
        literal["scheduleJob"]["data"],
        json!([1, "two", { "zone": "UTC", "amounts": [] }])
    );
    assert_eq!(
        literal["scheduleJob"]["body"],
        r#"[1,"two",{"zone":"UTC","amounts":[]}]"#
    );

    let job = app
        .data(
            Some(&admin),
            "{ job(topic: \"scalars\", id: \"d1\") { data } }",
            json!({}),
        )
        .await;
    assert_eq!(job["job"]["data"], data);

    let too_big = json!({ "text": "x".repeat(64 * 1024) });
    for refused in [
        json!({ "id": "x1", "data": { "a": 1 }, "body": "{\"a\": 1}" }),
        json!({ "id": "x2" }),
        json!({ "id": "x3", "data": too_big }),
    ] {
        let id = refused["id"].clone();
        let body = app.gql(Some(&admin), SCHEDULE, schedule(refused)).await;
        assert_eq!(
            first_code(&body),
            "BAD_USER_INPUT",
            "{id}: {}",
            body["errors"]
        );
    }
}

#[tokio::test]
async fn a_past_months_calendar_has_no_today_and_the_current_one_has() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4_102);
    for day in [27, 28] {
        let at = NaiveDate::from_ymd_opt(2026, 2, day).unwrap();
        app.set_clock(at.and_hms_opt(10, 0, 0).unwrap().and_utc());
        app.data(Some(&token), "mutation { signIn { date } }", json!({}))
            .await;
    }
    // The 1st of March, not yet signed: the streak still ends yesterday.
    let first = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
    app.set_clock(first.and_hms_opt(10, 0, 0).unwrap().and_utc());

    let february = app
        .data(Some(&token), CALENDAR, json!({ "m": "2026-02" }))
        .await["signCalendar"]
        .clone();
    assert_eq!(february["month"], "2026-02");
    assert_eq!(february["signedDays"], 2);
    assert_eq!(february["today"], Value::Null);
    assert_eq!(
        february["makeUpsLeft"], 0,
        "a past month's days cannot be made up"
    );
    // The deprecated fields answer as before: today's, whatever the month.
    assert_eq!(february["signedToday"], false);
    assert_eq!(february["streak"], 2);

    let march = app.data(Some(&token), CALENDAR, json!({})).await["signCalendar"].clone();
    assert_eq!(march["month"], "2026-03");
    assert_eq!(
        march["today"],
        json!({ "date": "2026-03-01", "signed": false, "streak": 2 })
    );

    app.data(Some(&token), "mutation { signIn { date } }", json!({}))
        .await;
    let signed = app
        .data(Some(&token), CALENDAR, json!({ "m": "2026-03" }))
        .await["signCalendar"]
        .clone();
    assert_eq!(
        signed["today"],
        json!({ "date": "2026-03-01", "signed": true, "streak": 3 })
    );
    assert_eq!(signed["signedToday"], true);
}

#[tokio::test]
async fn each_scalar_names_its_specification() {
    let app = TestApp::spawn().await;
    let query = "{ dateTime: __type(name: \"DateTime\") { kind specifiedByURL description } \
                   date: __type(name: \"Date\") { kind specifiedByURL description } \
                   json: __type(name: \"JSON\") { kind specifiedByURL description } }";
    let types = app.data(None, query, json!({})).await;
    for (alias, url) in [
        (
            "dateTime",
            "https://scalars.graphql.org/andimarek/date-time.html",
        ),
        (
            "date",
            "https://scalars.graphql.org/andimarek/local-date.html",
        ),
        ("json", "https://www.rfc-editor.org/rfc/rfc8259"),
    ] {
        assert_eq!(types[alias]["kind"], "SCALAR", "{types}");
        assert_eq!(types[alias]["specifiedByURL"], url, "{types}");
        assert!(types[alias]["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty()));
    }
}
