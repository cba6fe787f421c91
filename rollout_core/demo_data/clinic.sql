-- A neighbourhood clinic: doctors, patients and a year of appointments (2024).

CREATE TABLE doctors (
    doctor_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    specialty TEXT NOT NULL,
    years_experience INTEGER NOT NULL,
    room TEXT NOT NULL
);

CREATE TABLE patients (
    patient_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    birth_year INTEGER NOT NULL,
    city TEXT NOT NULL,
    insured INTEGER NOT NULL CHECK (insured IN (0, 1))
);

CREATE TABLE appointments (
    appointment_id INTEGER PRIMARY KEY,
    doctor_id INTEGER NOT NULL REFERENCES doctors (doctor_id),
    patient_id INTEGER NOT NULL REFERENCES patients (patient_id),
    appointment_date TEXT NOT NULL,
    reason TEXT NOT NULL,
    status TEXT NOT NULL,
    fee REAL NOT NULL
);

INSERT INTO doctors (doctor_id, name, specialty, years_experience, room) VALUES
    (1, 'Dr. Amara Osei', 'General Practice', 18, 'A1'),
    (2, 'Dr. Bruno Keller', 'General Practice', 6, 'A2'),
    (3, 'Dr. Chloe Martin', 'Paediatrics', 11, 'B1'),
    (4, 'Dr. Daniel Ibarra', 'Dermatology', 9, 'B2'),
    (5, 'Dr. Eva Horvath', 'Cardiology', 22, 'C1'),
    (6, 'Dr. Farah Siddiqui', 'Physiotherapy', 4, 'D1'),
    (7, 'Dr. George Lam', 'Dermatology', 15, 'B3'),
    (8, 'Dr. Hanna Kowalski', 'Neurology', 13, 'C2');

INSERT INTO patients (patient_id, name, birth_year, city, insured) VALUES
    (1, 'Aaron Blake', 1958, 'Northport', 1),
    (2, 'Bianca Rossi', 1990, 'Northport', 1),
    (3, 'Caleb Young', 2015, 'Westfield', 1),
    (4, 'Dana Whitaker', 1976, 'Westfield', 0),
    (5, 'Elias Novak', 1983, 'Northport', 1),
    (6, 'Fiona Gallagher', 2012, 'Lakeview', 1),
    (7, 'Gustavo Lima', 1969, 'Lakeview', 1),
    (8, 'Hazel Morgan', 1995, 'Northport', 0),
    (9, 'Ivan Petrov', 1949, 'Westfield', 1),
    (10, 'Julia Stein', 2001, 'Lakeview', 1),
    (11, 'Kwame Asante', 1987, 'Northport', 1),
    (12, 'Lucia Romero', 2018, 'Westfield', 1),
    (13, 'Martin Dubois', 1962, 'Lakeview', 0),
    (14, 'Nina Jovanovic', 1979, 'Northport', 1),
    (15, 'Owen Price', 2010, 'Westfield', 1),
    (16, 'Priyanka Das', 1993, 'Lakeview', 1),
    (17, 'Quinn Harper', 1971, 'Northport', 0),
    (18, 'Rosa Ortega', 1955, 'Westfield', 1),
    (19, 'Stefan Varga', 1988, 'Lakeview', 1),
    (20, 'Talia Cohen', 2020, 'Northport', 1),
    (21, 'Umar Farouk', 1966, 'Westfield', 1),
    (22, 'Vera Lindgren', 1998, 'Lakeview', 0),
    (23, 'Wesley Grant', 1974, 'Northport', 1),
    (24, 'Xenia Popova', 2008, 'Westfield', 1),
    (25, 'Yara Haddad', 1985, 'Lakeview', 1),
    (26, 'Zeno Marchetti', 1952, 'Northport', 1),
    (27, 'Abel Mensah', 1999, 'Westfield', 0),
    (28, 'Bettina Kraus', 1964, 'Lakeview', 1),
    (29, 'Cyrus Tehrani', 1981, 'Northport', 1),
    (30, 'Delia Marsh', 2003, 'Southbridge', 1);

-- 200 appointments in 2024; reasons and fees follow the doctor's specialty.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200),
appt AS (
    SELECT
        i,
        CASE WHEN i % 9 = 0 THEN 5 ELSE ((i * 5 + i / 8) % 8) + 1 END AS doctor_id,
        ((i * 11 + i / 6) % 29) + 1 AS patient_id
    FROM n
)
INSERT INTO appointments (appointment_id, doctor_id, patient_id, appointment_date, reason, status,
                          fee)
SELECT
    a.i,
    a.doctor_id,
    a.patient_id,
    date('2024-01-02', '+' || ((a.i * 29) % 360) || ' days'),
    CASE d.specialty
        WHEN 'General Practice' THEN CASE a.i % 3 WHEN 0 THEN 'check-up' WHEN 1 THEN 'flu'
                                                ELSE 'back pain' END
        WHEN 'Paediatrics' THEN CASE a.i % 2 WHEN 0 THEN 'vaccination' ELSE 'check-up' END
        WHEN 'Dermatology' THEN CASE a.i % 2 WHEN 0 THEN 'rash' ELSE 'mole check' END
        WHEN 'Cardiology' THEN CASE a.i % 2 WHEN 0 THEN 'ECG' ELSE 'blood pressure' END
        WHEN 'Physiotherapy' THEN 'back pain'
        ELSE 'migraine'
    END,
    CASE WHEN a.i % 13 = 0 THEN 'cancelled' WHEN a.i % 17 = 0 THEN 'no-show' ELSE 'completed' END,
    CASE d.specialty
        WHEN 'General Practice' THEN 45.0
        WHEN 'Paediatrics' THEN 50.0
        WHEN 'Physiotherapy' THEN 60.0
        WHEN 'Dermatology' THEN 85.0
        ELSE 120.0
    END + (a.i % 4) * 2.5
FROM appt AS a JOIN doctors AS d ON d.doctor_id = a.doctor_id
ORDER BY a.i;
