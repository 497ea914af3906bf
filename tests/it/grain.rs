//! Validation that reads the data at a declared grain: computed figures, named refusals, the
//! canonical digest's properties, bad input, and a cross-check with a real DuckDB.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use manifestdb::{
    Candidate, DataFormat, FileCheck, FileEntry, GateFailure, Grain, PublishOptions, PublishOutcome, ReconcileBasis, Reconciliation,
    RefusalReason, RunSpec, Store, StoreOptions, TaskKey, TaskSpec, Verdict, describe_file,
};
use proptest::prelude::*;

const DATASET: &str = "daily_units";
const PARTITION: &str = "date=2026-11-29/region=eu";
const SNAPSHOT: &str = "sales@1";

/// One output row at the (store, item) grain.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    store: i64,
    item: String,
    units: i64,
}

fn row(store: i64, item: &str, units: i64) -> Row {
    Row { store, item: item.to_owned(), units }
}

fn grain(format: DataFormat) -> Grain {
    Grain::new(format, &["store", "item"], "units")
}

fn csv_text(rows: &[Row]) -> String {
    let mut text = String::from("item,units,store\n");
    for r in rows {
        text.push_str(&format!("{},{},{}\n", r.item, r.units, r.store));
    }
    text
}

fn write_csv(dir: &Path, name: &str, rows: &[Row]) -> FileEntry {
    fs::write(dir.join(name), csv_text(rows)).expect("write csv");
    describe_file(dir, name).expect("describe")
}

fn batch(rows: &[Row]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("store", DataType::Int64, false),
        Field::new("item", DataType::Utf8, false),
        Field::new("units", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(rows.iter().map(|r| r.store).collect::<Vec<_>>())),
        Arc::new(StringArray::from(rows.iter().map(|r| r.item.as_str()).collect::<Vec<_>>())),
        Arc::new(Int64Array::from(rows.iter().map(|r| r.units).collect::<Vec<_>>())),
    ];
    RecordBatch::try_new(schema, columns).expect("batch")
}

fn write_batch(dir: &Path, name: &str, batch: &RecordBatch) -> FileEntry {
    let file = fs::File::create(dir.join(name)).expect("create parquet");
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).expect("parquet writer");
    writer.write(batch).expect("write parquet");
    writer.close().expect("close parquet");
    describe_file(dir, name).expect("describe")
}

fn write_parquet(dir: &Path, name: &str, rows: &[Row]) -> FileEntry {
    write_batch(dir, name, &batch(rows))
}

/// A store with one declared run at `grain` expecting `rows` rows summing to `total`.
struct Fixture {
    store: Store,
    task: TaskKey,
    _dir: crate::support::TestDir,
}

impl Fixture {
    fn new(grain: Option<Grain>, rows: u64, total: i64) -> Fixture {
        Fixture::with_options(grain, rows, total, &StoreOptions::default())
    }

    fn with_options(grain: Option<Grain>, rows: u64, total: i64, options: &StoreOptions) -> Fixture {
        let dir = crate::support::TestDir::new();
        let store = dir.open_with(options).expect("open");
        let fixture = Fixture { _dir: dir, store, task: TaskKey::new(DATASET, "r1", PARTITION) };
        fixture.declare("r1", grain, rows, total);
        fixture
    }

    fn declare(&self, run: &str, grain: Option<Grain>, rows: u64, total: i64) {
        self.store
            .declare_run(&RunSpec {
                dataset: DATASET.into(),
                run: run.into(),
                snapshot: SNAPSHOT.into(),
                tasks: vec![TaskSpec { partition: PARTITION.into(), expected_rows: rows, expected_total: Some(total) }],
                trust_reported_figures: grain.is_none(),
                grain,
            })
            .expect("declare");
    }

    /// Begins an attempt of `run`, lets `write` put files into its staging directory, finishes
    /// it with the reported figures and validates it.
    fn attempt(
        &self,
        run: &str,
        reported: (Option<u64>, Option<i64>, Option<&str>),
        write: impl FnOnce(&Path) -> Vec<FileEntry>,
    ) -> (Verdict, Reconciliation) {
        let ticket = self.store.begin_attempt(&TaskKey::new(DATASET, run, PARTITION)).expect("begin");
        let files = write(&ticket.staging_dir);
        let candidate =
            Candidate { snapshot: SNAPSHOT.into(), rows: reported.0, total: reported.1, digest: reported.2.map(str::to_owned), files };
        self.store.finish_attempt(&ticket.key, &candidate).expect("finish");
        let verdict = self.store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate");
        let info = self.store.snapshot().expect("snapshot").attempt(&ticket.key).expect("attempt").expect("attempt exists");
        (verdict, info.reconciliation.expect("a verdict is stored with its figures"))
    }

    fn validate(&self, write: impl FnOnce(&Path) -> Vec<FileEntry>) -> (Verdict, Reconciliation) {
        self.attempt(&self.task.run.clone(), (None, None, None), write)
    }
}

fn failures(verdict: &Verdict) -> &[GateFailure] {
    match verdict {
        Verdict::Invalid(failures) => failures,
        Verdict::Valid => panic!("expected an invalid verdict"),
    }
}

fn rows_eu() -> Vec<Row> {
    vec![row(1, "apple", 3), row(1, "pear", 5), row(2, "apple", 7), row(3, "fig", 10)]
}

#[test]
fn a_zero_byte_file_reported_as_five_rows_is_refused() {
    // The issue's new user: an empty file reported as 5 rows / 200 validated and published.
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 5, 200);
    let (verdict, figures) = f.attempt("r1", (Some(5), Some(200), None), |dir| {
        fs::write(dir.join("part.csv"), "").unwrap();
        vec![describe_file(dir, "part.csv").unwrap()]
    });
    let failures = failures(&verdict);
    assert!(failures.contains(&GateFailure::RowsMismatch { expected: 5, got: 0 }), "{failures:?}");
    assert!(failures.contains(&GateFailure::TotalMismatch { expected: 200, got: Some(0) }), "{failures:?}");
    assert!(failures.contains(&GateFailure::ReportedMismatch { figure: "rows".into(), reported: "5".into(), computed: "0".into() }));
    assert_eq!((figures.expected_rows, figures.reported_rows, figures.computed_rows), (5, Some(5), Some(0)));
    let refused = f.store.publish(DATASET, "r1", &PublishOptions::default()).unwrap();
    assert!(matches!(refused, PublishOutcome::Refused(_)));
}

#[test]
fn a_zero_byte_csv_under_a_grain_is_refused_naming_the_missing_header_even_when_zero_rows_are_expected() {
    // Zero rows expected and zero read: before, the empty file passed as "0 rows". A CSV at a
    // grain names its columns in a header line; a file without one is not a partition of none.
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 0, 0);
    let (verdict, _) = f.attempt("r1", (None, None, None), |dir| {
        fs::write(dir.join("part.csv"), "").unwrap();
        vec![describe_file(dir, "part.csv").unwrap()]
    });
    let failures = failures(&verdict);
    let header = failures.iter().find_map(|f| match f {
        GateFailure::MalformedFile { path, message } if path == "part.csv" => Some(message.clone()),
        _ => None,
    });
    let header = header.unwrap_or_else(|| panic!("no failure names the missing header: {failures:?}"));
    assert!(header.contains("header") && header.contains("item, store, units"), "{header}");
    // The header alone is a partition of no rows, and valid.
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 0, 0);
    let (verdict, figures) = f.validate(|dir| vec![write_csv(dir, "part.csv", &[])]);
    assert_eq!(verdict, Verdict::Valid);
    assert_eq!(figures.computed_rows, Some(0));
}

#[test]
fn a_valid_partition_records_the_computed_figures_and_publishes_the_computed_digest() {
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 4, 25);
    let (verdict, figures) = f.validate(|dir| vec![write_csv(dir, "part.csv", &rows_eu())]);
    assert_eq!(verdict, Verdict::Valid);
    assert_eq!(figures.basis, ReconcileBasis::Read { format: DataFormat::Csv });
    assert_eq!((figures.computed_rows, figures.computed_total, figures.duplicate_keys), (Some(4), Some(25), 0));
    let digest = figures.computed_digest.clone().expect("computed digest");
    assert!(digest.starts_with("ms256:4:"), "{digest}");
    let PublishOutcome::Published(generation) = f.store.publish(DATASET, "r1", &PublishOptions::default()).unwrap() else {
        panic!("refused")
    };
    let manifest = f.store.snapshot().unwrap().manifest(DATASET, Some(generation.number)).unwrap().unwrap();
    assert_eq!((manifest.partitions[0].rows, manifest.partitions[0].total), (4, Some(25)));
    assert_eq!(manifest.partitions[0].digest, digest);
    assert!(manifest.partitions[0].figures_checked, "a grain's figures are the store's own");
}

#[test]
fn correct_reported_numbers_do_not_hide_a_missing_row() {
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 4, 25);
    let mut rows = rows_eu();
    rows.pop();
    let (verdict, _) = f.attempt("r1", (Some(4), Some(25), None), |dir| vec![write_csv(dir, "part.csv", &rows)]);
    let failures = failures(&verdict);
    assert!(failures.contains(&GateFailure::RowsMismatch { expected: 4, got: 3 }), "{failures:?}");
    assert!(failures.contains(&GateFailure::TotalMismatch { expected: 25, got: Some(15) }), "{failures:?}");
}

#[test]
fn a_wrong_total_is_a_total_mismatch() {
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 4, 25);
    let mut rows = rows_eu();
    rows[0].units += 1;
    let (verdict, _) = f.validate(|dir| vec![write_csv(dir, "part.csv", &rows)]);
    assert_eq!(failures(&verdict), [GateFailure::TotalMismatch { expected: 25, got: Some(26) }]);
}

#[test]
fn a_duplicated_grain_key_under_correct_counts_is_named_with_its_key() {
    // Same rows and total as expected, but (1, apple) twice and (1, pear) gone.
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 4, 25);
    let mut rows = rows_eu();
    rows[1].item = "apple".into();
    let (verdict, figures) = f.attempt("r1", (Some(4), Some(25), None), |dir| vec![write_csv(dir, "part.csv", &rows)]);
    assert_eq!(failures(&verdict), [GateFailure::DuplicateGrainKey { duplicates: 1, key: vec!["1".into(), "apple".into()] }]);
    assert_eq!(figures.duplicate_keys, 1);
}

#[test]
fn duplicates_are_counted_exactly_when_the_key_set_spills_to_disk() {
    let options = StoreOptions { grain_key_bytes_in_memory_max: 4096, ..StoreOptions::default() };
    let mut rows: Vec<Row> = (0..3000).map(|i| row(i % 1000, &format!("item-{}", i % 7), 1)).collect();
    // (i % 1000, i % 7) repeats with period 7000 > 3000, so these are unique; add 250 repeats.
    rows.extend((0..250).map(|i| row(i % 1000, &format!("item-{}", i % 7), 1)));
    let f = Fixture::with_options(Some(grain(DataFormat::Csv)), 3250, 3250, &options);
    let (verdict, figures) = f.validate(|dir| vec![write_csv(dir, "part.csv", &rows)]);
    assert_eq!(figures.duplicate_keys, 250);
    assert!(matches!(failures(&verdict), [GateFailure::DuplicateGrainKey { duplicates: 250, .. }]));
    // The spill directory is gone afterwards.
    let staging = f.store.staging_root().to_path_buf();
    let leftovers: Vec<_> =
        fs::read_dir(&staging).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".manifestdb-keys")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_missing_key_and_a_non_integer_measure_are_named_with_their_lines() {
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 3, 10);
    let (verdict, figures) = f.validate(|dir| {
        fs::write(dir.join("part.csv"), "store,item,units\n1,apple,3\n,pear,5\n2,fig,2.5\n").unwrap();
        vec![describe_file(dir, "part.csv").unwrap()]
    });
    let failures = failures(&verdict);
    assert!(
        failures.contains(&GateFailure::MissingKey { path: "part.csv".into(), location: "line 3".into(), column: "store".into() }),
        "{failures:?}"
    );
    assert!(
        failures.iter().any(|f| matches!(f, GateFailure::UnparsableRow { path, location, message }
            if path == "part.csv" && location == "line 4" && message.contains("decimal places"))),
        "{failures:?}"
    );
    assert_eq!((figures.computed_rows, figures.rejected_rows), (Some(3), 2));
}

#[test]
fn a_declared_scale_reads_decimal_cents() {
    let mut g = Grain::new(DataFormat::Csv, &["invoice_id", "line"], "amount");
    g.measure_scale = 2;
    let f = Fixture::new(Some(g), 2, 1325);
    let (verdict, figures) = f.validate(|dir| {
        fs::write(dir.join("lines.csv"), "invoice_id,line,amount\nA-1,1,12.50\nA-1,2,0.75\n").unwrap();
        vec![describe_file(dir, "lines.csv").unwrap()]
    });
    assert_eq!(verdict, Verdict::Valid);
    assert_eq!(figures.computed_total, Some(1325));
}

#[test]
fn a_csv_with_a_different_header_is_a_columns_mismatch() {
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 1, 3);
    let (verdict, _) = f.validate(|dir| {
        fs::write(dir.join("part.csv"), "store,product,units\n1,apple,3\n").unwrap();
        vec![describe_file(dir, "part.csv").unwrap()]
    });
    assert!(failures(&verdict).contains(&GateFailure::ColumnsMismatch {
        path: "part.csv".into(),
        expected: vec!["item".into(), "store".into(), "units".into()],
        got: vec!["store".into(), "product".into(), "units".into()],
    }));
}

#[test]
fn non_utf8_text_is_an_unparsable_row_not_a_panic() {
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 2, 8);
    let (verdict, _) = f.validate(|dir| {
        let mut bytes = b"store,item,units\n1,apple,3\n1,".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe, b'x']);
        bytes.extend_from_slice(b",5\n");
        fs::write(dir.join("part.csv"), bytes).unwrap();
        vec![describe_file(dir, "part.csv").unwrap()]
    });
    assert!(
        failures(&verdict).iter().any(|f| matches!(f, GateFailure::UnparsableRow { location, message, .. }
            if location == "line 3" && message.contains("not UTF-8"))),
        "{verdict:?}"
    );
}

#[test]
fn a_two_gib_single_line_csv_stops_at_the_record_limit() {
    // A sparse 2 GiB file: a header, then one field of NUL bytes that never ends. Memory stays
    // at the record limit (1 MiB here), and the reader stops there instead of reading 2 GiB.
    let options = StoreOptions { csv_record_bytes_max: 1 << 20, ..StoreOptions::default() };
    let f = Fixture::with_options(Some(grain(DataFormat::Csv)), 1, 1, &options);
    let started = std::time::Instant::now();
    let (verdict, figures) = f.validate(|dir| {
        let path = dir.join("huge.csv");
        let file = fs::File::create(&path).unwrap();
        use std::io::Write;
        (&file).write_all(b"store,item,units\n1,").unwrap();
        file.set_len(2 << 30).unwrap();
        // Size only: a CRC would read all of it.
        vec![FileEntry { path: "huge.csv".into(), size_bytes: 2 << 30, crc32: 0 }]
    });
    assert!(
        failures(&verdict).iter().any(|f| matches!(f, GateFailure::UnparsableRow { message, .. }
            if message.contains("longer than the limit of 1048576 bytes"))),
        "{verdict:?}"
    );
    assert_eq!(figures.bytes_read, 2 << 30);
    eprintln!("2 GiB single-line CSV refused in {:?}", started.elapsed());
}

#[test]
fn a_run_without_a_grain_says_its_figures_are_reported_only() {
    let f = Fixture::new(None, 4, 25);
    let (verdict, figures) =
        f.attempt("r1", (Some(4), Some(25), Some("worker-digest")), |dir| vec![write_csv(dir, "part.csv", &rows_eu())]);
    assert_eq!(verdict, Verdict::Valid);
    assert_eq!(figures.basis, ReconcileBasis::Reported);
    assert_eq!((figures.computed_rows, figures.computed_digest), (None, None));
    // And such a run still needs the worker's figures.
    let ticket = f.store.begin_attempt(&f.task).unwrap();
    let candidate = Candidate { snapshot: SNAPSHOT.into(), rows: None, total: None, digest: None, files: vec![] };
    assert!(f.store.finish_attempt(&ticket.key, &candidate).is_err());
    // Published, its partition says the figures were not checked (what `show` prints as
    // "reported, not checked").
    assert!(matches!(f.store.publish(DATASET, "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    let snapshot = f.store.snapshot().unwrap();
    let manifest = snapshot.manifest(DATASET, None).unwrap().unwrap();
    assert!(!manifest.partitions[0].figures_checked);
    assert!(!snapshot.partition(DATASET, PARTITION, None).unwrap().unwrap().figures_checked);
}

#[test]
fn a_run_without_a_grain_is_refused_unless_it_trusts_the_reported_figures_in_words() {
    let dir = crate::support::TestDir::new();
    let store = dir.open().expect("open");
    let task = TaskSpec::new(PARTITION, 5);
    // The issue's silent path: a RunSpec built without a grain, nothing said.
    let silent = RunSpec::new(DATASET, "r1", SNAPSHOT).with_task(task.clone());
    let err = store.declare_run(&silent).unwrap_err();
    assert_eq!(err.kind(), manifestdb::ErrorKind::Usage);
    assert!(err.to_string().contains("declares no grain") && err.to_string().contains("trust_reported_figures"), "{err}");
    // Both at once contradict each other.
    let both = silent.clone().with_grain(grain(DataFormat::Csv)).trust_reported_figures();
    assert!(store.declare_run(&both).unwrap_err().to_string().contains("give one of the two"));
    assert!(store.snapshot().unwrap().run(DATASET, "r1").unwrap().is_none(), "a refused declaration writes nothing");
    // Said in words, or with a grain: declared.
    store.declare_run(&silent.trust_reported_figures()).expect("trusted");
    store.declare_run(&RunSpec::new(DATASET, "r2", SNAPSHOT).with_task(task).with_grain(grain(DataFormat::Csv))).expect("grain");
}

#[test]
fn a_rerun_in_another_row_order_and_split_reproduces_the_digest_and_a_changed_row_is_flagged() {
    let f = Fixture::new(Some(grain(DataFormat::Csv)), 4, 25);
    let (verdict, _) = f.validate(|dir| vec![write_csv(dir, "part.csv", &rows_eu())]);
    assert_eq!(verdict, Verdict::Valid);
    assert!(matches!(f.store.publish(DATASET, "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    // Same rows, reversed and split over two files.
    f.declare("r2", Some(grain(DataFormat::Csv)), 4, 25);
    let mut rows = rows_eu();
    rows.reverse();
    let (verdict, _) =
        f.attempt("r2", (None, None, None), |dir| vec![write_csv(dir, "a.csv", &rows[..1]), write_csv(dir, "b.csv", &rows[1..])]);
    assert_eq!(verdict, Verdict::Valid);
    assert!(matches!(f.store.publish(DATASET, "r2", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    // One changed row with the same counts and total: the determinism check refuses it.
    f.declare("r3", Some(grain(DataFormat::Csv)), 4, 25);
    let mut changed = rows_eu();
    changed[0].units += 1;
    changed[1].units -= 1;
    let (verdict, _) = f.attempt("r3", (None, None, None), |dir| vec![write_csv(dir, "part.csv", &changed)]);
    assert_eq!(verdict, Verdict::Valid);
    let PublishOutcome::Refused(refusal) = f.store.publish(DATASET, "r3", &PublishOptions::default()).unwrap() else {
        panic!("a changed row must be flagged as non-deterministic")
    };
    assert!(matches!(refusal.tasks[0].reason, RefusalReason::Nondeterministic { .. }));
}

// ---- Parquet ----

#[test]
fn parquet_and_csv_of_the_same_rows_give_the_same_figures() {
    let csv = Fixture::new(Some(grain(DataFormat::Csv)), 4, 25);
    let (_, from_csv) = csv.validate(|dir| vec![write_csv(dir, "part.csv", &rows_eu())]);
    let parquet = Fixture::new(Some(grain(DataFormat::Parquet)), 4, 25);
    let (verdict, from_parquet) = parquet.validate(|dir| vec![write_parquet(dir, "part.parquet", &rows_eu())]);
    assert_eq!(verdict, Verdict::Valid);
    assert_eq!(from_parquet.basis, ReconcileBasis::Read { format: DataFormat::Parquet });
    assert_eq!(
        (from_csv.computed_rows, from_csv.computed_total, &from_csv.computed_digest),
        (from_parquet.computed_rows, from_parquet.computed_total, &from_parquet.computed_digest)
    );
}

#[test]
fn a_truncated_parquet_file_is_malformed() {
    let f = Fixture::new(Some(grain(DataFormat::Parquet)), 4, 25);
    let (verdict, _) = f.validate(|dir| {
        write_parquet(dir, "part.parquet", &rows_eu());
        let bytes = fs::read(dir.join("part.parquet")).unwrap();
        fs::write(dir.join("part.parquet"), &bytes[..bytes.len() / 2]).unwrap();
        vec![describe_file(dir, "part.parquet").unwrap()]
    });
    assert!(
        failures(&verdict).iter().any(|f| matches!(f, GateFailure::MalformedFile { path, .. } if path == "part.parquet")),
        "{verdict:?}"
    );
}

#[test]
fn a_parquet_footer_claiming_more_rows_than_the_data_holds_is_refused() {
    use parquet::file::metadata::{FileMetaData, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter};
    let f = Fixture::new(Some(grain(DataFormat::Parquet)), 4, 25);
    let (verdict, _) = f.validate(|dir| {
        write_parquet(dir, "part.parquet", &rows_eu());
        let bytes = fs::read(dir.join("part.parquet")).unwrap();
        let file = fs::File::open(dir.join("part.parquet")).unwrap();
        let metadata = ParquetMetaDataReader::new().parse_and_finish(&file).unwrap();
        // Keep the data pages; write a footer whose row group claims 1000 more rows.
        let footer_len = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap()) as usize;
        let data_end = bytes.len() - 8 - footer_len;
        let groups: Vec<_> =
            metadata.row_groups().iter().map(|g| g.clone().into_builder().set_num_rows(g.num_rows() + 1000).build().unwrap()).collect();
        let fm = metadata.file_metadata();
        let lying = ParquetMetaData::new(
            FileMetaData::new(
                fm.version(),
                fm.num_rows() + 1000,
                fm.created_by().map(str::to_owned),
                fm.key_value_metadata().cloned(),
                fm.schema_descr_ptr(),
                fm.column_orders().cloned(),
            ),
            groups,
        );
        let mut out = bytes[..data_end].to_vec();
        ParquetMetaDataWriter::new(&mut out, &lying).finish().unwrap();
        fs::write(dir.join("part.parquet"), out).unwrap();
        vec![describe_file(dir, "part.parquet").unwrap()]
    });
    let failures = failures(&verdict);
    assert!(failures.iter().any(|f| matches!(f, GateFailure::MalformedFile { .. } | GateFailure::UnparsableRow { .. })), "{failures:?}");
    eprintln!("footer claiming more rows: {failures:?}");
}

#[test]
fn binary_and_deeply_nested_parquet_columns_are_unsupported_column_types() {
    use arrow_array::Array;
    use arrow_array::builder::{BinaryBuilder, Int64Builder, ListBuilder};
    let f = Fixture::new(Some(grain(DataFormat::Parquet)), 1, 3);
    let (verdict, _) = f.validate(|dir| {
        let mut items = BinaryBuilder::new();
        items.append_value([0xffu8, 0x00]);
        let mut units = ListBuilder::new(ListBuilder::new(Int64Builder::new()));
        units.values().values().append_value(3);
        units.values().append(true);
        units.append(true);
        let units = units.finish();
        let schema = Arc::new(Schema::new(vec![
            Field::new("store", DataType::Int64, false),
            Field::new("item", DataType::Binary, false),
            Field::new("units", units.data_type().clone(), true),
        ]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1])), Arc::new(items.finish()), Arc::new(units) as ArrayRef])
                .unwrap();
        vec![write_batch(dir, "odd.parquet", &batch)]
    });
    let failures = failures(&verdict);
    let unsupported: Vec<&str> = failures
        .iter()
        .filter_map(|f| match f {
            GateFailure::UnsupportedColumnType { column, .. } => Some(column.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(unsupported, ["item", "units"], "{failures:?}");
}

#[test]
fn a_null_parquet_key_is_a_missing_key_with_its_row_group() {
    let f = Fixture::new(Some(grain(DataFormat::Parquet)), 2, 8);
    let (verdict, _) = f.validate(|dir| {
        let schema = Arc::new(Schema::new(vec![
            Field::new("store", DataType::Int64, true),
            Field::new("item", DataType::Utf8, true),
            Field::new("units", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("apple"), Some("pear")])),
                Arc::new(Int64Array::from(vec![Some(3), Some(5)])),
            ],
        )
        .unwrap();
        vec![write_batch(dir, "part.parquet", &batch)]
    });
    assert!(failures(&verdict).contains(&GateFailure::MissingKey {
        path: "part.parquet".into(),
        location: "row group 0, row 1".into(),
        column: "store".into()
    }));
}

// ---- properties of the canonical digest ----

fn rows_strategy() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec((0i64..50, "[a-z]{1,6}", -1000i64..1000), 1..40).prop_map(|v| {
        // Unique keys, as a valid partition has.
        let mut seen = std::collections::HashSet::new();
        v.into_iter().filter(|(s, i, _)| seen.insert((*s, i.clone()))).map(|(store, item, units)| Row { store, item, units }).collect()
    })
}

fn digest_of(format: DataFormat, files: &[Vec<Row>]) -> (u64, Option<i64>, String) {
    let total: i64 = files.iter().flatten().map(|r| r.units).sum();
    let rows = files.iter().map(Vec::len).sum::<usize>() as u64;
    let f = Fixture::new(Some(grain(format)), rows, total);
    let (_, figures) = f.validate(|dir| {
        files
            .iter()
            .enumerate()
            .map(|(i, rows)| match format {
                DataFormat::Parquet => write_parquet(dir, &format!("part-{i}.parquet"), rows),
                _ => write_csv(dir, &format!("part-{i}.csv"), rows),
            })
            .collect()
    });
    (figures.computed_rows.unwrap_or(0), figures.computed_total, figures.computed_digest.unwrap_or_default())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn shuffled_and_split_rows_give_the_same_digest_in_csv_and_parquet(
        rows in rows_strategy(),
        seed in any::<u64>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let whole = digest_of(DataFormat::Csv, std::slice::from_ref(&rows));
        let mut shuffled = rows.clone();
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
        rand::seq::SliceRandom::shuffle(shuffled.as_mut_slice(), &mut rng);
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(shuffled.len() + 1)).collect();
        points.sort_unstable();
        let mut files = Vec::new();
        let mut start = 0;
        for p in points.into_iter().chain(std::iter::once(shuffled.len())) {
            files.push(shuffled[start..p].to_vec());
            start = p;
        }
        prop_assert_eq!(&digest_of(DataFormat::Csv, &files), &whole);
        prop_assert_eq!(&digest_of(DataFormat::Parquet, &files), &whole);
    }

    #[test]
    fn any_single_changed_added_or_removed_row_changes_the_digest(
        rows in rows_strategy(),
        which in any::<prop::sample::Index>(),
        change in 0u8..4,
    ) {
        let (_, _, original) = digest_of(DataFormat::Csv, std::slice::from_ref(&rows));
        let mut changed = rows.clone();
        let i = which.index(changed.len());
        match change {
            0 => changed[i].units += 1,
            1 => changed[i].item.push('x'),
            2 => { changed.remove(i); }
            _ => changed.push(Row { store: 99, item: "new".into(), units: 0 }),
        }
        let (_, _, other) = digest_of(DataFormat::Csv, &[changed]);
        prop_assert_ne!(other, original);
    }
}

// ---- cross-check with a real engine ----

/// Whether `python3` can import duckdb and pyarrow. In CI (`CI=true`) their absence fails the
/// test; elsewhere the test says loudly that it skipped.
fn duckdb_available(test: &str) -> bool {
    let ok = std::process::Command::new("python3").args(["-c", "import duckdb, pyarrow"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: python3 with duckdb and pyarrow is required in CI (.ci/run installs them)"
        );
        eprintln!("\n!!! SKIPPED {test}: python3 cannot import duckdb and pyarrow (pip install duckdb pyarrow) !!!\n");
    }
    ok
}

/// Has pyarrow write `rows` (with a duplicate and a decimal measure) into Parquet and CSV, and
/// DuckDB compute count(*), sum(units) and count(*) - count(distinct (store, item)) over each.
const DUCKDB_SCRIPT: &str = r#"
import json, random, sys
import duckdb, pyarrow as pa, pyarrow.parquet as pq, pyarrow.csv as pacsv
out, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
n = rng.randint(1, 3000)
stores = [rng.randint(1, 60) for _ in range(n)]
items = ["item-%d" % rng.randint(1, 80) for _ in range(n)]
units = [rng.randint(-50, 500) for _ in range(n)]
table = pa.table({"store": pa.array(stores, pa.int32()), "item": pa.array(items, pa.string()), "units": pa.array(units, pa.int64())})
pq.write_table(table, out + "/part.parquet", row_group_size=max(1, n // 3))
pacsv.write_csv(table, out + "/part.csv")
con = duckdb.connect()
res = {}
for name, reader in [("parquet", "read_parquet('%s/part.parquet')" % out), ("csv", "read_csv('%s/part.csv', header=true, all_varchar=true)" % out)]:
    rows, total, dup = con.execute(
        "select count(*), sum(cast(units as bigint)), count(*) - count(distinct (store, item)) from " + reader).fetchone()
    res[name] = {"rows": rows, "total": int(total), "duplicates": dup}
print(json.dumps(res))
"#;

#[test]
fn computed_figures_equal_duckdbs_on_partitions_written_by_pyarrow() {
    if !duckdb_available("computed_figures_equal_duckdbs_on_partitions_written_by_pyarrow") {
        return;
    }
    for seed in 0..4u64 {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new("python3")
            .args(["-c", DUCKDB_SCRIPT, dir.path().to_str().unwrap(), &seed.to_string()])
            .output()
            .expect("python3");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let duck: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        for (format, name) in [(DataFormat::Parquet, "part.parquet"), (DataFormat::Csv, "part.csv")] {
            let expected = &duck[format.name()];
            let rows = expected["rows"].as_u64().unwrap();
            let total = expected["total"].as_i64().unwrap();
            let f = Fixture::new(Some(grain(format)), rows, total);
            let (_, figures) = f.validate(|staging| {
                fs::copy(dir.path().join(name), staging.join(name)).unwrap();
                vec![describe_file(staging, name).unwrap()]
            });
            assert_eq!(figures.computed_rows, Some(rows), "{format} seed {seed}");
            assert_eq!(figures.computed_total, Some(total), "{format} seed {seed}");
            assert_eq!(figures.duplicate_keys, expected["duplicates"].as_u64().unwrap(), "{format} seed {seed}");
            assert_eq!(figures.rejected_rows, 0);
        }
    }
}
